# One library target per folder, built the same way:
#   tandem_add_component(runtime SOURCES a.cpp b.cpp DEPS TBB::tbb
#                        [CUDA_SOURCES x.cu] [CUDA_DEPS CUDA::cudart] [NOCUDA_SOURCES x_none.cpp])
# CUDA_SOURCES are built only with the CUDA backend, NOCUDA_SOURCES only without it: the CUDA
# build adds files, the core never #ifdefs on CUDA.
# creates `tandem_runtime` (alias tandem::runtime) with the repository root on the include
# path, so code includes "runtime/actor.hpp".
set(TANDEM_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wno-missing-field-initializers)

function(tandem_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${TANDEM_WARNINGS}>)
  if(TANDEM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(TANDEM_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=${TANDEM_SANITIZE} -fno-omit-frame-pointer -g)
    target_link_options(${target} PRIVATE -fsanitize=${TANDEM_SANITIZE})
    if(TANDEM_SANITIZE MATCHES "thread")
      # moodycamel's queue uses standalone fences, which TSan does not model, and GCC reports
      # them after inlining, through libstdc++'s <atomic>, so the SYSTEM include does not hide
      # them. Tandem's own hand-off uses none (Actor::claim/resume, ActorSystem::send); the
      # queue's reports are suppressed frame by frame in tests/tsan.supp.
      target_compile_options(${target} PRIVATE -Wno-tsan)
    endif()
  endif()
endfunction()

function(tandem_add_component name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;CUDA_SOURCES;CUDA_DEPS;NOCUDA_SOURCES" ${ARGN})
  set(target tandem_${name})
  set(sources ${ARG_SOURCES})
  if(TANDEM_HAVE_CUDA)
    list(APPEND sources ${ARG_CUDA_SOURCES})
  else()
    list(APPEND sources ${ARG_NOCUDA_SOURCES})
  endif()
  add_library(${target} STATIC ${sources})
  add_library(tandem::${name} ALIAS ${target})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${target} PUBLIC ${ARG_DEPS})
  if(TANDEM_HAVE_CUDA)
    target_link_libraries(${target} PUBLIC ${ARG_CUDA_DEPS})
    target_compile_definitions(${target} PUBLIC TANDEM_HAVE_CUDA=1)
  endif()
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  tandem_target_defaults(${target})
endfunction()

# tandem_add_test(name SOURCES ... DEPS ... [LABELS ...]): one gtest executable, registered
# with ctest through gtest_discover_tests so each TEST is its own ctest entry.
include(GoogleTest)
function(tandem_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gtest)
  tandem_target_defaults(${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()

# tandem_add_bench(name SOURCES ... DEPS ...): a Google Benchmark executable.
function(tandem_add_bench name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
  tandem_target_defaults(${name})
endfunction()
