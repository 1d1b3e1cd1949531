# `cmake --install`: the embedding API as the CMake package Tandem (target Tandem::tandem).
#   <prefix>/include/tandem/*.hpp                 the public headers, the only promised API
#   <prefix>/lib/libtandem.so*                    the library
#   <prefix>/lib/libtandem_<component>.so         the core it loads (not an interface)
#   <prefix>/lib/cmake/Tandem/                    TandemConfig.cmake, version, targets
# The headers are listed, not computed: the list is the promise (docs/embedding.md), and each
# of them includes only the standard library and the others (tests/api's
# InstalledHeaderIsSelfContained compiles tandem.hpp from an install and checks both).
if(NOT TARGET tandem_api)
  return()
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TANDEM_PUBLIC_HEADERS tandem.hpp device.hpp dtype.hpp error.hpp tensor.hpp kernels.hpp layer.hpp)
list(TRANSFORM TANDEM_PUBLIC_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/include/tandem/
     OUTPUT_VARIABLE public_header_files)
install(FILES ${public_header_files} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tandem
        COMPONENT Tandem_Development)

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/Tandem)
# The core's libraries, which libtandem.so loads (and a plugin links against), beside it.
set(tandem_core_libraries)
foreach(component runtime schedules models transport actors planner train)
  list(APPEND tandem_core_libraries tandem_${component})
endforeach()
install(TARGETS tandem_api ${tandem_core_libraries} EXPORT TandemTargets
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
