# EmbeddingApi.InstalledHeaderIsSelfContained (cmake -P): installs the package's headers into a
# fresh PREFIX and compiles a file that includes only <tandem/tandem.hpp> from there, with the
# project's warnings as errors. It fails when the compile fails (a header that includes one the
# install does not hold: models/, runtime/, ...), when the compile reads any file of the
# repository (SOURCE_DIR, BUILD_DIR) instead of the install, when a header it reads lies outside
# <prefix>/include/tandem/ (no internal/ folder), or when the install holds a header the
# compile did not read (the install is the public headers and nothing else).
cmake_minimum_required(VERSION 3.25)
foreach(var BUILD_DIR PREFIX CXX SOURCE_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "installed_header_test.cmake: -D${var}=... is missing")
  endif()
endforeach()

file(REMOVE_RECURSE ${PREFIX})
execute_process(
  COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
          --component Tandem_Development
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BUILD_DIR} --prefix ${PREFIX} failed:\n${out}")
endif()

set(probe ${PREFIX}/probe.cpp)
file(WRITE ${probe} "#include <tandem/tandem.hpp>\n"
                    "int main() { return tandem::version().empty() ? 1 : 0; }\n")
execute_process(
  COMMAND ${CXX} -std=c++20 -Wall -Wextra -Wpedantic -Wshadow -Werror -I${PREFIX}/include
          -c ${probe} -o ${PREFIX}/probe.o -MD -MF ${PREFIX}/probe.d
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "<tandem/tandem.hpp> from ${PREFIX}/include does not compile alone:\n${out}")
endif()

# The make rule the compiler wrote: "probe.o: probe.cpp a.hpp \\\n b.hpp ...".
file(READ ${PREFIX}/probe.d rule)
string(REGEX REPLACE "^[^:]*:" "" rule "${rule}")
string(REGEX REPLACE "\\\\\n" " " rule "${rule}")
string(REGEX REPLACE "[ \t\n]+" ";" deps "${rule}")
get_filename_component(prefix_real ${PREFIX} REALPATH)
get_filename_component(source_real ${SOURCE_DIR} REALPATH)
get_filename_component(build_real ${BUILD_DIR} REALPATH)
# Whether `path` lies under the folder `dir` (plain text, so no character of a path is read as
# a regular expression).
function(under out path dir)
  string(LENGTH "${dir}/" n)
  string(SUBSTRING "${path}" 0 ${n} head)
  if(head STREQUAL "${dir}/")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

set(read "")
foreach(dep IN LISTS deps)
  if(dep STREQUAL "")
    continue()
  endif()
  get_filename_component(dep ${dep} REALPATH BASE_DIR ${PREFIX})
  under(in_install ${dep} ${prefix_real}/include)
  under(in_source ${dep} ${source_real})
  under(in_build ${dep} ${build_real})
  if(dep STREQUAL "${prefix_real}/probe.cpp")
    continue()
  elseif(in_install)
    file(RELATIVE_PATH rel ${prefix_real}/include ${dep})
    if(NOT rel MATCHES "^tandem/[^/]+\\.hpp$")
      message(FATAL_ERROR "<tandem/tandem.hpp> reads ${rel}, outside include/tandem/")
    endif()
    list(APPEND read ${rel})
  elseif(in_source OR in_build)
    message(FATAL_ERROR "<tandem/tandem.hpp> reads ${dep}, a file of the repository")
  elseif(dep MATCHES "/(models|runtime|kernels|internal)/")
    message(FATAL_ERROR "<tandem/tandem.hpp> reads ${dep}")
  endif()
endforeach()

file(GLOB_RECURSE installed RELATIVE ${PREFIX}/include ${PREFIX}/include/*)
foreach(h IN LISTS installed)
  if(NOT h IN_LIST read)
    message(FATAL_ERROR "the install holds ${h}, which <tandem/tandem.hpp> does not read")
  endif()
endforeach()
list(SORT read)
message(STATUS "<tandem/tandem.hpp> reads only the installed public headers: ${read}")
