# xlac's CMake module: compile ONNX models into static libraries at build time.
#
#   find_package(xlac REQUIRED)        # with -Dxlac_DIR="$(xlac --cmake-dir)", or
#   include(/path/printed/by/xlac --cmake-dir/xlac.cmake)
#
#   xlac_add_model(TARGET MODEL.onnx [NAME n] [TARGET_TRIPLE t] [CPU c] [OPTIONS ...])
#   target_link_libraries(app PRIVATE TARGET)
#
# xlac_add_model runs `xlac MODEL.onnx -o NAME.o` when the build needs the object
# (again whenever MODEL.onnx changes) and makes TARGET a static library of that
# object and the C runtime (xlac_runtime.c, compiled by the project's own C
# compiler, so a cross build gets it for its target). Linking TARGET puts NAME.h
# and xlac_runtime.h on the include path.
#
#   NAME           the C symbol prefix (NAME_run, NAME_ARENA_SIZE...); default: TARGET
#                  as a C identifier
#   TARGET_TRIPLE  the LLVM triple to compile for; default: ${XLAC_TARGET_TRIPLE} when
#                  set (a toolchain file sets it), else this machine
#   CPU            the CPU; default: ${XLAC_CPU} when set, else xlac's default
#   OPTIONS        more arguments for xlac, e.g. --input-shape x=1x3x224x224 -O3
#
# The xlac command is ${XLAC_EXECUTABLE}: found on PATH unless set.
include_guard(GLOBAL)

find_program(XLAC_EXECUTABLE xlac DOC "the xlac command")
if(NOT XLAC_EXECUTABLE)
  message(FATAL_ERROR "xlac: the xlac command is not on PATH; install xlac (pip install xlac) "
                      "or set XLAC_EXECUTABLE")
endif()
execute_process(COMMAND "${XLAC_EXECUTABLE}" --runtime-dir OUTPUT_VARIABLE XLAC_RUNTIME_DIR
                RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT status EQUAL 0 OR NOT EXISTS "${XLAC_RUNTIME_DIR}/xlac_runtime.c")
  message(FATAL_ERROR "xlac: '${XLAC_EXECUTABLE} --runtime-dir' did not name the runtime's "
                      "folder; is XLAC_EXECUTABLE an xlac command?")
endif()

function(xlac_add_model target model)
  cmake_parse_arguments(PARSE_ARGV 2 ARG "" "NAME;TARGET_TRIPLE;CPU" "OPTIONS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "xlac_add_model(${target}): unknown arguments "
                        "${ARG_UNPARSED_ARGUMENTS} (NAME, TARGET_TRIPLE, CPU, OPTIONS)")
  endif()
  get_filename_component(model "${model}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT ARG_NAME)
    string(MAKE_C_IDENTIFIER "${target}" ARG_NAME)
  endif()
  if(NOT ARG_TARGET_TRIPLE)
    set(ARG_TARGET_TRIPLE "${XLAC_TARGET_TRIPLE}")
  endif()
  if(NOT ARG_CPU)
    set(ARG_CPU "${XLAC_CPU}")
  endif()

  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/xlac/${target}")
  set(object "${out_dir}/${ARG_NAME}.o")
  set(header "${out_dir}/${ARG_NAME}.h")
  set(args "${model}" -o "${object}" --name "${ARG_NAME}")
  if(ARG_TARGET_TRIPLE)
    list(APPEND args --target "${ARG_TARGET_TRIPLE}")
  endif()
  if(ARG_CPU)
    list(APPEND args --cpu "${ARG_CPU}")
  endif()
  list(APPEND args ${ARG_OPTIONS})
  add_custom_command(
    OUTPUT "${object}" "${header}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${out_dir}"
    COMMAND "${XLAC_EXECUTABLE}" ${args}
    DEPENDS "${model}"
    COMMENT "xlac: compiling ${model} into ${ARG_NAME}.o"
    VERBATIM)
  add_library(${target} STATIC "${object}" "${header}" "${XLAC_RUNTIME_DIR}/xlac_runtime.c")
  set_source_files_properties("${object}" PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  target_include_directories(${target} PUBLIC "${out_dir}" "${XLAC_RUNTIME_DIR}")
endfunction()
