# Install rules and cpack's Debian packages (docs/packages.md):
#   rtraind  the daemon, its hardened systemd unit (deploy/rtraind.service
#            with User=rtrain, made by the postinst) and its configuration
#   rtrain   the CLI and librtrain: shared library, headers, pkg-config file
#   cpack --config build/CPackConfig.cmake -B OUT   (OUT/rtraind_V_ARCH.deb ...)
# Paths are Debian's: /usr with a multiarch libdir, /lib/systemd/system,
# /etc/rtrain.
if(CMAKE_LIBRARY_ARCHITECTURE AND NOT DEFINED CACHE{CMAKE_INSTALL_LIBDIR})
  set(CMAKE_INSTALL_LIBDIR lib/${CMAKE_LIBRARY_ARCHITECTURE} CACHE PATH "object code libraries")
endif()
include(GNUInstallDirs)

# ---- rtraind
install(TARGETS rtraind RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT daemon)
# The packaged unit is deploy/rtraind.service with the package's paths and a
# static system user (made by the postinst, so files it leaves outside the
# state directory keep one owner across upgrades) in place of DynamicUser;
# RemoveIPC is what DynamicUser implied beyond the unit's own hardening.
file(READ ${CMAKE_SOURCE_DIR}/deploy/rtraind.service rt_unit)
string(REPLACE "/usr/local/bin/rtraind" "/usr/sbin/rtraind" rt_unit "${rt_unit}")
string(REPLACE "file:///usr/local/share/doc/rtrain/" "file:///usr/share/doc/rtraind/"
       rt_unit "${rt_unit}")
string(REPLACE "DynamicUser=yes" "User=rtrain\nGroup=rtrain\nRemoveIPC=yes" rt_unit "${rt_unit}")
string(REGEX REPLACE "^# systemd unit for rtraind. Install:[^[]*\\[Unit\\]"
       "# systemd unit for rtraind, from the rtraind package (deploy/rtraind.service).\n# Configure /etc/rtrain/rtraind.env, then: systemctl enable --now rtraind\n[Unit]"
       rt_unit "${rt_unit}")
string(REPLACE "# A user allocated at start, no account on the host; its files live in"
       "# The system user the package made; its files live in" rt_unit "${rt_unit}")
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/deb/rtraind.service CONTENT "${rt_unit}")
install(FILES ${CMAKE_BINARY_DIR}/deb/rtraind.service DESTINATION /lib/systemd/system
        COMPONENT daemon)
install(FILES ${CMAKE_SOURCE_DIR}/deploy/rtraind.env DESTINATION /etc/rtrain COMPONENT daemon)
install(FILES ${CMAKE_SOURCE_DIR}/docs/operations.md ${CMAKE_SOURCE_DIR}/docs/design.md
              ${CMAKE_SOURCE_DIR}/docs/security.md ${CMAKE_SOURCE_DIR}/docs/packages.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/rtraind COMPONENT daemon)

# ---- rtrain: the CLI and librtrain
# rtrain-bench beside rtrain: `rtrain bench ...` runs it from there
install(TARGETS rtrain_cli rtrain_bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT client)
install(TARGETS rtrain_client_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        COMPONENT client)
install(FILES ${CMAKE_SOURCE_DIR}/include/rtrain/rtrain.h
              ${CMAKE_SOURCE_DIR}/include/rtrain/rtrain_data.h
              ${CMAKE_SOURCE_DIR}/include/rtrain/rtrain_tb.h
              ${CMAKE_SOURCE_DIR}/include/rtrain/rt_error.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/rtrain COMPONENT client)
# rtrain.pc finds its prefix from its own place: as many ../ as the libdir
# (plus pkgconfig/) is deep.
string(REGEX REPLACE "[^/]+" ".." RT_PC_UP "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
configure_file(${CMAKE_SOURCE_DIR}/deploy/deb/rtrain.pc.in ${CMAKE_BINARY_DIR}/deb/rtrain.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/deb/rtrain.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT client)
# The build tree's librtrain for pip install ./client/python (docs/packages.md)
set(RT_CLIENT_LIBDIR ${CMAKE_BINARY_DIR}/client/lib)
configure_file(${CMAKE_SOURCE_DIR}/deploy/deb/rtrain-uninstalled.pc.in
               ${CMAKE_BINARY_DIR}/pkgconfig/rtrain-uninstalled.pc @ONLY)

# ---- cpack
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME rtrain)
set(CPACK_PACKAGE_VENDOR "rtrain")
set(CPACK_PACKAGE_CONTACT "rtrain maintainers <rtrain@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL daemon client)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME rtraind)
set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS "passwd")
set(CPACK_COMPONENT_DAEMON_DESCRIPTION
    "rtrain remote training daemon\nrtraind trains Keras and ONNX models sent by rtrain clients over gRPC.\nRuns as the rtrain system user under a hardened systemd unit.")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/deploy/deb/rtraind/postinst ${CMAKE_SOURCE_DIR}/deploy/deb/rtraind/prerm
    ${CMAKE_SOURCE_DIR}/deploy/deb/rtraind/postrm ${CMAKE_SOURCE_DIR}/deploy/deb/rtraind/conffiles)
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME rtrain)
set(CPACK_COMPONENT_CLIENT_DESCRIPTION
    "rtrain client: the rtrain command and librtrain\nUploads models and data to an rtraind and trains them remotely; librtrain\nwith its headers and pkg-config file (rtrain.pc).")
if(RT_NATIVE)
  message(STATUS "rtrain packages: RT_NATIVE=ON builds the daemon for this CPU only; configure with -DRT_NATIVE=OFF for packages other hosts install")
endif()
include(CPack)
