# find_package(xlac) finds this file through xlac_DIR:
#
#   cmake -S . -B build -Dxlac_DIR="$(xlac --cmake-dir)"
#
# It defines xlac_add_model(); see xlac.cmake beside it.
include("${CMAKE_CURRENT_LIST_DIR}/xlac.cmake")
set(xlac_FOUND TRUE)
