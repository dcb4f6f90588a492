/* Placeholder test: the attention emitter is being written. */
int main(void)
{
    return 77;
}
