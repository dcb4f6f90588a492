/* scratch: compile a .cu with NVRTC like search/compile.c, the device library from ops/device (run from the repository root) */
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    FILE *f = fopen(argv[1], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); rewind(f);
    char *s = malloc(n + 1); fread(s, 1, n, f); s[n] = 0; fclose(f);
    nvrtcProgram p; nvrtcCreateProgram(&p, s, "ktune_kernel.cu", 0, NULL, NULL);
    const char *o[] = {"--gpu-architecture=sm_90a", "-lineinfo", "--ptxas-options=-v", "-std=c++17", "--include-path=ops/device"};
    nvrtcResult r = nvrtcCompileProgram(p, 5, o);
    size_t ln; nvrtcGetProgramLogSize(p, &ln); char *log = malloc(ln + 1); nvrtcGetProgramLog(p, log); fprintf(stderr, "%s", log);
    if (r) return 1;
    size_t cn; nvrtcGetCUBINSize(p, &cn); char *c = malloc(cn); nvrtcGetCUBIN(p, c);
    f = fopen(argv[2], "wb"); fwrite(c, 1, cn, f); fclose(f); return 0;
}
