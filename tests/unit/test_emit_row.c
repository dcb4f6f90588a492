/* Placeholder test: the row emitter is being written. */
int main(void)
{
    return 77;
}
