/* Placeholder test: the pointwise emitter is being written. */
int main(void)
{
    return 77;
}
