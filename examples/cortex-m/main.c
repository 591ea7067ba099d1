/* Runs one model compiled by xlac on a bare-metal Cortex-M: reads every input from
 * inputK.bin, calls the model, writes every output to outputK.bin and prints the
 * status and the stack the call used. The files go through semihosting (a debug
 * probe, or QEMU's -semihosting), which newlib's librdimon implements.
 *
 * The model is compiled with --name model, so its header is model.h and its symbols
 * start with model_. In an application, replace the file I/O with the sensor buffer
 * and call model_run() with typed pointers (see model.h).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

/* The scratch memory, aligned as the header asks (+1: the size may be 0). */
static uint8_t arena[model_ARENA_SIZE + 1] __attribute__((aligned(model_ARENA_ALIGN)));

/* Stack high-water mark: paint the free stack, run, find the deepest word written. */
#define PAINT 0xC5C5C5C5u
extern uint32_t __stack_limit__;

static uint32_t *stack_pointer(void) {
    uint32_t *sp;
    __asm volatile("mov %0, sp" : "=r"(sp));
    return sp;
}

static int read_file(const char *path, void *data, size_t size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return -1;
    size_t got = fread(data, 1, size, f);
    fclose(f);
    return got == size ? 0 : -1;
}

static int write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (f == NULL) return -1;
    size_t put = fwrite(data, 1, size, f);
    return fclose(f) == 0 && put == size ? 0 : -1;
}

#ifdef COUNTER_ADDRESS
/* A free-running counter of the board (MPS2's FPGAIO COUNTER). Under QEMU's
   -icount shift=0 each executed instruction advances the virtual clock by 1 ns, so
   the counter counts instructions in fixed steps; calibrate() measures the step. */
#define COUNTER() (*(volatile uint32_t *)(COUNTER_ADDRESS))

/* Ticks of a loop of exactly 2 * 2^20 + 1 instructions (subs/bne; mov). */
__attribute__((noinline))
static uint32_t calibrate(void) {
    uint32_t start = COUNTER(), n;
    __asm volatile("mov %0, #0x100000\n1:\n\tsubs %0, %0, #1\n\tbne 1b" : "=r"(n) :: "cc");
    return COUNTER() - start;
}
#endif

#ifdef PROFILE_SITES
/* An object built with EmitOptions(profile=True, profile_counter=the counter's address)
   (benchmarks/cortex_m.py --profile): the counter's ticks per step, written to
   profile.bin after the call. */
extern uint64_t model_profile_cycles[PROFILE_SITES];
#endif

/* Calls model_run_v on a painted stack; returns its status, *used the bytes of stack
   it touched (the model and the memcpy/memset it calls) and *ticks the counter's
   ticks during the call (0 without COUNTER_ADDRESS). */
__attribute__((noinline))
static int run_measured(const void *const *inputs, void *const *outputs, size_t *used,
                        uint32_t *ticks) {
    /* Everything below the stack pointer is free until the call. Volatile: a loop
       the compiler turned into memset would paint over memset's own frame. */
    volatile uint32_t *top = stack_pointer();
    volatile uint32_t *p = &__stack_limit__;
    while (p < top) *p++ = PAINT;
#ifdef COUNTER_ADDRESS
    uint32_t start = COUNTER();
    int status = model_run_v(inputs, outputs, arena);
    *ticks = COUNTER() - start;
#else
    int status = model_run_v(inputs, outputs, arena);
    *ticks = 0;
#endif
    p = &__stack_limit__;
    while (p < top && *p == PAINT) ++p;
    *used = (size_t)((uint8_t *)top - (uint8_t *)p);
    return status;
}

int main(void) {
    const void *inputs[model_NUM_INPUTS + 1];
    void *outputs[model_NUM_OUTPUTS + 1];
    char path[32];
    for (int k = 0; k < model_NUM_INPUTS; ++k) {
        size_t size = (size_t)model_info.inputs[k].size_bytes;
        void *data = malloc(size ? size : 1);
        snprintf(path, sizeof path, "input%d.bin", k);
        if (data == NULL || read_file(path, data, size) != 0) {
            fprintf(stderr, "cannot read %s (%lu bytes)\n", path, (unsigned long)size);
            return 2;
        }
        inputs[k] = data;
    }
    for (int k = 0; k < model_NUM_OUTPUTS; ++k) {
        size_t size = (size_t)model_info.outputs[k].size_bytes;
        outputs[k] = malloc(size ? size : 1);
        if (outputs[k] == NULL) {
            fprintf(stderr, "out of memory for output %d\n", k);
            return 2;
        }
    }
    size_t stack = 0;
    uint32_t ticks = 0;
    int status = run_measured(inputs, outputs, &stack, &ticks);
    printf("model: status %d, stack %lu bytes\n", status, (unsigned long)stack);
#ifdef COUNTER_ADDRESS
    /* Instructions per tick, from the calibration loop's 2^21 + 1 instructions. */
    printf("model: %lu ticks, calibration %lu ticks for 2097153 instructions\n",
           (unsigned long)ticks, (unsigned long)calibrate());
#endif
    if (status != 0) return 1;
#ifdef PROFILE_SITES
    if (write_file("profile.bin", model_profile_cycles, sizeof model_profile_cycles) != 0) {
        fprintf(stderr, "cannot write profile.bin\n");
        return 2;
    }
#endif
    for (int k = 0; k < model_NUM_OUTPUTS; ++k) {
        snprintf(path, sizeof path, "output%d.bin", k);
        if (write_file(path, outputs[k], (size_t)model_info.outputs[k].size_bytes) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 2;
        }
    }
    return 0;
}
