/* Placeholder test: being written (issue 2). */
int main(void)
{
    return 77;
}
