# EmberInstall.cmake — `cmake --install` rules: the libraries, the public headers, the CLIs, a
# CMake package (find_package(Ember) gives the Ember:: targets below) and a pkg-config file.
#
#   cmake --install build --prefix /opt/ember
#   find_package(Ember REQUIRED)          # with CMAKE_PREFIX_PATH=/opt/ember
#   target_link_libraries(app PRIVATE Ember::runtime)
#   cc app.c $(pkg-config --cflags --libs ember)   # PKG_CONFIG_PATH=/opt/ember/lib/pkgconfig
#
# One static archive (libember.a) and one shared library (libember.so) hold the runtime core,
# the portable, prim and quantized kernels, the extensions (loaders, em_module, LLM runner) and
# EmberCpuBackend. The component names are interface targets over that archive, so a project
# says what it uses and keeps working if the archive is ever split:
#   Ember::runtime            the core + extensions (include/ember, ember_ext)
#   Ember::portable_kernels   em_register_prim_ops / em_register_portable_kernels /
#                             em_register_quantized_kernels
#   Ember::cpu_backend        em_register_cpu_backend
#   Ember::ember              everything, static;  Ember::ember_shared  everything, shared
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(EMBER_VERSION 0.1.0)
foreach(t ember_static ember_shared)
  set_property(TARGET ${t} PROPERTY INTERFACE_INCLUDE_DIRECTORIES
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include;${PROJECT_SOURCE_DIR}/extension>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
endforeach()
set_target_properties(ember_static PROPERTIES EXPORT_NAME ember)
set_target_properties(ember_shared PROPERTIES EXPORT_NAME ember_shared VERSION ${EMBER_VERSION}
                      SOVERSION 0)
foreach(component runtime portable_kernels cpu_backend)
  add_library(ember_pkg_${component} INTERFACE)
  target_link_libraries(ember_pkg_${component} INTERFACE ember_static)
  set_target_properties(ember_pkg_${component} PROPERTIES EXPORT_NAME ${component})
  add_library(Ember::${component} ALIAS ember_pkg_${component})
endforeach()

install(TARGETS ember_static ember_shared ember_pkg_runtime ember_pkg_portable_kernels
                ember_pkg_cpu_backend
        EXPORT EmberTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/ember DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(DIRECTORY extension/ember_ext DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
foreach(tool ember ember-llm)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

set(EMBER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Ember)
install(EXPORT EmberTargets NAMESPACE Ember:: DESTINATION ${EMBER_CMAKE_DIR})
configure_package_config_file(cmake/EmberConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/EmberConfig.cmake INSTALL_DESTINATION ${EMBER_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/EmberConfigVersion.cmake
  VERSION ${EMBER_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/EmberConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/EmberConfigVersion.cmake
        DESTINATION ${EMBER_CMAKE_DIR})

if(EMBER_NO_THREADS OR EMBER_PLATFORM_NOOS)
  set(EMBER_PC_LIBS "-lm")
else()
  set(EMBER_PC_LIBS "-lpthread -lm")
endif()
# Relocatable: the prefix is found from the .pc file's own directory (`cmake --install --prefix`).
file(RELATIVE_PATH EMBER_PC_UP /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" EMBER_PC_UP "${EMBER_PC_UP}")
configure_file(cmake/ember.pc.in ${CMAKE_CURRENT_BINARY_DIR}/ember.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ember.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
