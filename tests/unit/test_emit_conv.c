/* Placeholder test: the conv emitter is being written. */
int main(void)
{
    return 77;
}
