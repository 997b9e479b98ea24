# ONNX import, optional (STRATA_WITH_ONNX: ON, OFF or AUTO = on when found).
# Sets STRATA_ONNX (ON/OFF). Debian's libonnx-dev exports `onnx_proto`, whose
# link interface names protobuf::libprotobuf: Protobuf is found first so that
# target exists. onnx_proto carries ONNX_NAMESPACE=onnx and ONNX_ML=1, the
# settings Debian built the library with (ONNXTargets.cmake). Without ONNX a
# network path ending in .onnx is a clear error (docs/onnx.md).
set(STRATA_ONNX OFF)
if(NOT STRATA_WITH_ONNX STREQUAL "OFF")
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND)
    find_package(ONNX CONFIG QUIET)
  endif()
  if(Protobuf_FOUND AND ONNX_FOUND AND TARGET onnx_proto AND TARGET protobuf::libprotobuf)
    set(STRATA_ONNX ON)
  elseif(STRATA_WITH_ONNX STREQUAL "ON")
    message(FATAL_ERROR "STRATA_WITH_ONNX=ON but ONNX (libonnx-dev) or protobuf "
                        "(libprotobuf-dev) was not found")
  endif()
endif()
message(STATUS "strata: ONNX import ${STRATA_ONNX}")
