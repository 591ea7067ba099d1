/* Runs one model compiled by xlac (--name model) as a Linux program: reads every input
 * from inputK.bin, writes every output to outputK.bin. tests/test_qemu_user.py links it
 * statically for AArch64 and RISC-V 64 and runs it under qemu-user. */
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

static void *read_file(const char *path, size_t size) {
    void *data = malloc(size ? size : 1);
    FILE *f = fopen(path, "rb");
    if (data == NULL || f == NULL || fread(data, 1, size, f) != size) {
        fprintf(stderr, "cannot read %s (%lu bytes)\n", path, (unsigned long)size);
        exit(2);
    }
    fclose(f);
    return data;
}

int main(void) {
    const void *inputs[model_NUM_INPUTS + 1];
    void *outputs[model_NUM_OUTPUTS + 1];
    char path[32];
    for (int k = 0; k < model_NUM_INPUTS; ++k) {
        snprintf(path, sizeof path, "input%d.bin", k);
        inputs[k] = read_file(path, (size_t)model_info.inputs[k].size_bytes);
    }
    for (int k = 0; k < model_NUM_OUTPUTS; ++k)
        outputs[k] = malloc((size_t)model_info.outputs[k].size_bytes + 1);
    /* aligned_alloc wants a multiple of the alignment. */
    size_t arena_bytes = (model_ARENA_SIZE + model_ARENA_ALIGN) / model_ARENA_ALIGN * model_ARENA_ALIGN;
    void *arena = aligned_alloc(model_ARENA_ALIGN, arena_bytes);
    int status = model_run_v(inputs, outputs, arena);
    printf("model: status %d\n", status);
    if (status != 0) return 1;
    for (int k = 0; k < model_NUM_OUTPUTS; ++k) {
        snprintf(path, sizeof path, "output%d.bin", k);
        FILE *f = fopen(path, "wb");
        size_t size = (size_t)model_info.outputs[k].size_bytes;
        if (f == NULL || fwrite(outputs[k], 1, size, f) != size || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 2;
        }
    }
    return 0;
}
