# cmake -DIN=<dir> -DOUT=<dir> -P metal_prepare.cmake: copies the Metal sources (*.metal, *.h)
# with the attribute [[threadgroup(N)]] renamed [[msl_threadgroup_index(N)]], because the Linux
# checks compile them as C++ where `threadgroup` is a macro (tests/metal/compat/msl_compat.hpp).
file(GLOB sources "${IN}/*.metal" "${IN}/*.h")
file(MAKE_DIRECTORY "${OUT}")
foreach(source ${sources})
  file(READ "${source}" text)
  string(REPLACE "[[threadgroup(" "[[msl_threadgroup_index(" text "${text}")
  get_filename_component(name "${source}" NAME)
  file(WRITE "${OUT}/${name}.tmp" "${text}")
  file(COPY_FILE "${OUT}/${name}.tmp" "${OUT}/${name}" ONLY_IF_DIFFERENT)
  file(REMOVE "${OUT}/${name}.tmp")
endforeach()
