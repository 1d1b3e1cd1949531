# `cmake --install`: the embedding API as the CMake package Tandem (target Tandem::tandem).
#   <prefix>/include/tandem/tandem.hpp            the public header, the only promised API
#   <prefix>/include/tandem/internal/...          the repository headers it includes (Layer,
#                                                  Tensor), kept out of the top include dir
#   <prefix>/lib/libtandem.so*                    the library
#   <prefix>/lib/cmake/Tandem/                    TandemConfig.cmake, version, targets
if(NOT TARGET tandem_api)
  return()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The repository headers reachable from the public one through #include "...": computed, so that
# an include added to them later is installed too (CI builds examples/embed against the install).
function(tandem_header_closure out header)
  set(todo "")
  set(seen "")
  set(file ${header})
  while(TRUE)
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${file})
    file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\".*" "\\1" inc "${line}")
      if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${inc})
        message(FATAL_ERROR "${file} includes \"${inc}\", not a file under ${PROJECT_SOURCE_DIR}")
      endif()
      if(NOT inc IN_LIST seen AND NOT inc IN_LIST todo)
        list(APPEND todo ${inc})
      endif()
    endforeach()
    list(LENGTH todo n)
    if(n EQUAL 0)
      break()
    endif()
    list(POP_FRONT todo inc)
    list(APPEND seen ${inc})
    set(file ${PROJECT_SOURCE_DIR}/${inc})
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

set(public_header ${PROJECT_SOURCE_DIR}/include/tandem/tandem.hpp)
tandem_header_closure(internal_headers ${public_header})
install(FILES ${public_header} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem)
foreach(h IN LISTS internal_headers)
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${h}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem/internal/${dir})
endforeach()

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
install(TARGETS tandem_api EXPORT TandemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
)
install(EXPORT TandemTargets NAMESPACE Tandem:: DESTINATION ${config_dir})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/TandemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TandemConfig.cmake INSTALL_DESTINATION ${config_dir})
# 0.x: minor releases may change the API; a patch release never does.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TandemConfig.cmake ${PROJECT_BINARY_DIR}/TandemConfigVersion.cmake
  DESTINATION ${config_dir})
