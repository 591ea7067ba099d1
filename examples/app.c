/* Calls the LeNet example compiled by xlac from a plain C99 program.
 *
 *   xlac examples/lenet.onnx -o build/lenet.o
 *   cc examples/app.c build/lenet.o -Ibuild -I"$(xlac --runtime-dir)" -lm -o build/app
 *   ./build/app
 *
 * Everything the model needs lives in static storage: the input, the output and
 * the arena (scratch memory of lenet_ARENA_SIZE bytes, aligned to
 * lenet_ARENA_ALIGN). The object calls no malloc and keeps no mutable globals,
 * so one arena per thread is all a multi-threaded caller needs.
 */
#include <stdint.h>
#include <stdio.h>

#include "lenet.h"

/* C99 has no _Alignas: over-allocate by the alignment and round the pointer up.
   The "+ ARENA_ALIGN" also keeps the array non-empty when a model needs no arena. */
static unsigned char arena_storage[lenet_ARENA_SIZE + lenet_ARENA_ALIGN];

static void *aligned_arena(void) {
  uintptr_t p = (uintptr_t)arena_storage;
  p = (p + (lenet_ARENA_ALIGN - 1u)) & ~(uintptr_t)(lenet_ARENA_ALIGN - 1u);
  return (void *)p;
}

int main(void) {
  static float image[lenet_image_COUNT];
  static float probs[lenet_probs_COUNT];
  unsigned i, best = 0;
  int status;

  /* A deterministic input (tests/test_c_example.py builds the same one). */
  for (i = 0; i < lenet_image_COUNT; i++) image[i] = (float)(i % 17u) / 16.0f - 0.5f;

  status = lenet_run(image, probs, aligned_arena());
  printf("%s: status %d, arena %u bytes\n", lenet_info.name, status,
         (unsigned)lenet_ARENA_SIZE);
  if (status != 0) return 1;

  printf("%s:", lenet_info.outputs[0].name);
  for (i = 0; i < lenet_probs_COUNT; i++) {
    printf(" %.9g", probs[i]);
    if (probs[i] > probs[best]) best = i;
  }
  printf("\nclass %u\n", best);
  return 0;
}
