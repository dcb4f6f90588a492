/* Placeholder test: the library emitter is being written. */
int main(void)
{
    return 77;
}
