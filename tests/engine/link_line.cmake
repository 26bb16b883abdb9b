# engine_link_line: rt_engine's link closure (LIBS, every target and library
# it brings into a program's link, "|"-separated) and its compile options
# (OPTS) name no backend, no oneDNN and no OpenMP: the engine runs every
# step through the backend table (docs/backends.md), so a program may link
# the engine without any of them.
string(REPLACE "|" ";" libs "${LIBS}")
string(REPLACE "|" ";" opts "${OPTS}")
list(LENGTH libs n)
if(n LESS 2)
  message(FATAL_ERROR "no link closure given (LIBS='${LIBS}')")
endif()
message(STATUS "rt_engine links: ${libs}")
set(bad "")
foreach(l IN LISTS libs)
  if(l MATCHES "rt_backend|rt_kern|dnnl|onednn|OpenMP|gomp|libomp|libiomp")
    list(APPEND bad "${l}")
  endif()
endforeach()
foreach(o IN LISTS opts)
  if(o MATCHES "openmp")
    list(APPEND bad "option ${o}")
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "rt_engine brings in ${bad}: the engine links no backend, oneDNN or OpenMP")
endif()
message(STATUS "rt_engine: ${n} libraries and targets, none a backend, oneDNN or OpenMP")
