/* Minimal start-up code for Cortex-M (ARMv6-M, v7-M, v8-M mainline), newlib.
 *
 * The vector table holds the initial stack pointer and the reset handler; the
 * reset handler copies .data from flash, zeroes .bss, turns on the FPU where the
 * code was compiled for one, runs the C library's constructors and calls main().
 * Every fault ends the program through exit(), which under semihosting tells
 * the debugger (or QEMU) the status instead of hanging.
 *
 * Symbols come from sections.ld. Nothing here depends on the board.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern uint32_t __data_load__, __data_start__, __data_end__;
extern uint32_t __bss_start__, __bss_end__;
extern uint32_t __stack_top__;

extern int main(void);
extern void __libc_init_array(void);
extern void initialise_monitor_handles(void);   /* newlib's semihosting (librdimon) */

void Reset_Handler(void);
void Fault_Handler(void);

/* The exception numbers 1..15 of the architecture; no device interrupts are used. */
__attribute__((section(".vectors"), used))
void (*const vector_table[16])(void) = {
    (void (*)(void))(&__stack_top__),   /* 0: initial main stack pointer */
    Reset_Handler,                      /* 1: reset */
    Fault_Handler,                      /* 2: NMI */
    Fault_Handler,                      /* 3: HardFault */
    Fault_Handler,                      /* 4: MemManage (v7-M and up) */
    Fault_Handler,                      /* 5: BusFault */
    Fault_Handler,                      /* 6: UsageFault */
    Fault_Handler,                      /* 7: SecureFault (v8-M) */
    0, 0, 0,                            /* 8-10: reserved */
    Fault_Handler,                      /* 11: SVCall */
    Fault_Handler,                      /* 12: DebugMonitor */
    0,                                  /* 13: reserved */
    Fault_Handler,                      /* 14: PendSV */
    Fault_Handler,                      /* 15: SysTick */
};

void Reset_Handler(void) {
    uint32_t *src = &__data_load__, *dst = &__data_start__;
    while (dst < &__data_end__) *dst++ = *src++;
    for (dst = &__bss_start__; dst < &__bss_end__; ) *dst++ = 0;
#if defined(__ARM_FP)
    /* CPACR: full access to coprocessors 10 and 11 (the FPU) before any FP instruction. */
    *(volatile uint32_t *)0xE000ED88u |= 0xFu << 20;
    __asm volatile("dsb\n\tisb" ::: "memory");
#endif
    initialise_monitor_handles();
    __libc_init_array();
    exit(main());
}

/* __libc_init_array calls these; crti.o/crtn.o would bring them, but -nostartfiles
   leaves out newlib's own start-up (this file replaces it). */
void _init(void) {}
void _fini(void) {}

void Fault_Handler(void) {
    uint32_t ipsr;
    __asm volatile("mrs %0, ipsr" : "=r"(ipsr));
    fprintf(stderr, "fault: exception %lu\n", (unsigned long)(ipsr & 0x1FFu));
    exit(128 + (int)(ipsr & 0x1FFu));
}
