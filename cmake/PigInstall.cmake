# Installing pig as a library (`cmake --install build --prefix P`, `./pig install P`): the headers
# of spec, reference and runtime, their static libraries and the generated kernel library, a
# CMake package (find_package(pig CONFIG): pig::spec, pig::reference, pig::kernels, pig::runtime,
# pig::generated_kernels, and pig::c, the C interface libpig.so) and pkg-config files (pig.pc for
# C++, pig-c.pc for the C interface). A consumer needs neither MLIR nor LLVM:
# the installed libraries link Highway and the C++ runtime only. docs/LIBRARY.md shows both ways.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(pig_install_targets pig_spec pig_reference pig_kernels pig_runtime)
set_target_properties(pig_spec PROPERTIES EXPORT_NAME spec)
set_target_properties(pig_reference PROPERTIES EXPORT_NAME reference)
set_target_properties(pig_kernels PROPERTIES EXPORT_NAME kernels)
set_target_properties(pig_runtime PROPERTIES EXPORT_NAME runtime)
set(pig_pc_generated "")
if(TARGET pig_generated_kernels)
  list(APPEND pig_install_targets pig_generated_kernels)
  set_target_properties(pig_generated_kernels PROPERTIES EXPORT_NAME generated_kernels)
  set(pig_pc_generated "-lpig_generated_kernels")
endif()

if(TARGET pig_c) # libpig.so and pig.h: the C interface (capi/)
  list(APPEND pig_install_targets pig_c)
  set_target_properties(pig_c PROPERTIES EXPORT_NAME c)
  install(FILES ${PROJECT_SOURCE_DIR}/capi/include/pig.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT library)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/pig-c.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pig-c.pc @ONLY)
  install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pig-c.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT library)
endif()

install(TARGETS ${pig_install_targets} EXPORT pigTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
foreach(dir spec/include reference/include runtime/include)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/pig DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          COMPONENT library FILES_MATCHING PATTERN "*.h")
endforeach()

set(pig_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/pig)
install(EXPORT pigTargets NAMESPACE pig:: DESTINATION ${pig_cmake_dir} COMPONENT library)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/pigConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/pigConfig.cmake INSTALL_DESTINATION ${pig_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pigConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pigConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/pigConfigVersion.cmake
        DESTINATION ${pig_cmake_dir} COMPONENT library)

configure_file(${PROJECT_SOURCE_DIR}/cmake/pig.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pig.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pig.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT library)
