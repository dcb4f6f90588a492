/* Placeholder test: the reference emitter is being written. */
int main(void)
{
    return 77;
}
