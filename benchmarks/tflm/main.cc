/* TensorFlow Lite Micro's side of benchmarks/cortex_m.py: one .tflite model, run once
 * on an emulated Cortex-M under QEMU's -icount shift=0, with the board's FPGAIO counter
 * read around MicroInterpreter::Invoke() as examples/cortex-m/main.c reads it around
 * xlac's call (the same calibration loop, the same counter line).
 *
 * Built by benchmarks/tflm.py against the libtensorflow-microlite.a that TFLM's own
 * Makefile builds (OPTIMIZED_KERNEL_DIR=cmsis_nn), with the model as a C array
 * (model_data.cc). -DPROFILE: a MicroProfilerInterface on the same counter prints the
 * ticks of each operator. -DBASELINE: the same program without TFLM, the reference
 * its flash and RAM are measured against.
 */
#include <stdint.h>
#include <stdio.h>

#ifndef BASELINE
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/micro/micro_profiler_interface.h"
#include "tensorflow/lite/schema/schema_generated.h"

/* OPERATOR_COUNT and REGISTER_OPERATORS(resolver): the model's operators, written by
   benchmarks/tflm.py. */
#include "ops.h"

extern const unsigned char model_data[];
#endif

#define COUNTER() (*(volatile uint32_t *)(COUNTER_ADDRESS))

/* Ticks of a loop of exactly 2 * 2^20 + 1 instructions (subs/bne; mov). */
__attribute__((noinline)) static uint32_t calibrate(void) {
  uint32_t start = COUNTER(), n;
  __asm volatile("mov %0, #0x100000\n1:\n\tsubs %0, %0, #1\n\tbne 1b" : "=r"(n)::"cc");
  return COUNTER() - start;
}

#ifndef BASELINE
namespace {

/* Larger than any of the models needs; the figure reported is arena_used_bytes(). */
constexpr size_t kArenaSize = 512 * 1024;
alignas(16) uint8_t arena[kArenaSize];

#ifdef PROFILE
/* The counter's ticks of each operator, in the order Invoke runs them. */
class CounterProfiler : public tflite::MicroProfilerInterface {
 public:
  uint32_t BeginEvent(const char* tag) override {
    if (count_ < kMaxEvents) {
      tags_[count_] = tag;
      start_[count_] = COUNTER();
    }
    return count_++;
  }
  void EndEvent(uint32_t event) override {
    if (event < kMaxEvents) ticks_[event] = COUNTER() - start_[event];
  }
  void Reset() { count_ = 0; }
  void Print() const {
    for (uint32_t i = 0; i < count_ && i < kMaxEvents; ++i)
      printf("op %lu %s: %lu ticks\n", (unsigned long)i, tags_[i],
             (unsigned long)ticks_[i]);
  }

 private:
  static constexpr uint32_t kMaxEvents = 256;
  const char* tags_[kMaxEvents];
  uint32_t start_[kMaxEvents], ticks_[kMaxEvents];
  uint32_t count_ = 0;
};
#endif

}  // namespace
#endif

int main(void) {
#ifdef BASELINE
  uint32_t ticks = COUNTER() - COUNTER();
  printf("model: status 0, arena 0 bytes\n");
#else
  const tflite::Model* model = tflite::GetModel(model_data);
  /* Locals, not statics: a static with a destructor would need the C++ runtime's
     __cxa_atexit and __dso_handle, which startup.c's bare start-up leaves out. */
  tflite::MicroMutableOpResolver<OPERATOR_COUNT> resolver;
  REGISTER_OPERATORS(resolver);
#ifdef PROFILE
  CounterProfiler profiler;
  tflite::MicroInterpreter interpreter(model, resolver, arena, kArenaSize, nullptr,
                                       &profiler);
#else
  tflite::MicroInterpreter interpreter(model, resolver, arena, kArenaSize);
#endif
  if (interpreter.AllocateTensors() != kTfLiteOk) {
    printf("model: AllocateTensors failed\n");
    return 1;
  }
  /* A fixed pseudo-random input (the kernels' instruction counts hardly depend on
     it): int8 values, or floats in [-1, 1) where the model quantizes a float input. */
  for (size_t k = 0; k < interpreter.inputs_size(); ++k) {
    TfLiteTensor* input = interpreter.input(k);
    uint32_t state = 12345u + (uint32_t)k;
    bool is_float = input->type == kTfLiteFloat32;
    size_t n = is_float ? input->bytes / sizeof(float) : input->bytes;
    for (size_t i = 0; i < n; ++i) {
      state = state * 1664525u + 1013904223u;
      if (is_float)
        input->data.f[i] = (float)(int32_t)state * (1.0f / 2147483648.0f);
      else
        input->data.raw[i] = (char)(state >> 24);
    }
  }
#ifdef PROFILE
  profiler.Reset();
#endif
  uint32_t start = COUNTER();
  TfLiteStatus status = interpreter.Invoke();
  uint32_t ticks = COUNTER() - start;
  /* A checksum of the outputs, so a run that computes nothing shows. */
  uint32_t sum = 0;
  for (size_t k = 0; k < interpreter.outputs_size(); ++k) {
    const TfLiteTensor* output = interpreter.output(k);
    for (size_t i = 0; i < output->bytes; ++i)
      sum = sum * 31u + (uint8_t)output->data.raw[i];
  }
  printf("model: status %d, arena %lu bytes, checksum %08lx\n", (int)status,
         (unsigned long)interpreter.arena_used_bytes(), (unsigned long)sum);
#ifdef PROFILE
  profiler.Print();
#endif
  if (status != kTfLiteOk) return 1;
#endif
  printf("model: %lu ticks, calibration %lu ticks for 2097153 instructions\n",
         (unsigned long)ticks, (unsigned long)calibrate());
  return 0;
}
