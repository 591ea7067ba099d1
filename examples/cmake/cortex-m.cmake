# A CMake toolchain file for a Cortex-M4 with its FPU, bare metal, built with the Arm GNU
# toolchain and newlib (Debian: gcc-arm-none-eabi libnewlib-arm-none-eabi). It names
# the C compiler and its flags, and tells xlac_add_model what to compile models for
# (XLAC_TARGET_TRIPLE, XLAC_CPU), so the project's CMakeLists.txt needs no change.
#
# nosys.specs gives newlib stubs for its system calls: the firmware links and its
# printf goes nowhere. A board needs its own startup code, linker script and output:
# examples/cortex-m has them for the MPS2 boards QEMU emulates.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

set(CMAKE_C_FLAGS_INIT "-mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16")
set(CMAKE_EXE_LINKER_FLAGS_INIT "--specs=nosys.specs")

set(XLAC_TARGET_TRIPLE thumbv7em-none-eabihf)   # hard float, as the flags above
set(XLAC_CPU cortex-m4)
