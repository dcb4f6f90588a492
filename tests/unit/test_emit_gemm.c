/* Placeholder test: the gemm emitter is being written. */
int main(void)
{
    return 77;
}
