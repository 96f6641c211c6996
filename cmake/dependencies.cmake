# Every third-party package kvscope builds against, found once here and used through these
# targets: kvscope::httplib (cpp-httplib with the CPPHTTPLIB_* options Debian built it with,
# from its pkg-config file), kvscope::zmq (libzmq + cppzmq's header), kvscope::msgpack
# (msgpack-cxx, header only). Threads, nlohmann_json, Qt and CUDA come from the top level.
find_package(PkgConfig REQUIRED)
pkg_check_modules(KVSCOPE_HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
pkg_check_modules(KVSCOPE_LIBZMQ REQUIRED IMPORTED_TARGET GLOBAL libzmq)
find_path(KVSCOPE_CPPZMQ_INCLUDE zmq_addon.hpp REQUIRED)
find_path(KVSCOPE_MSGPACK_INCLUDE msgpack.hpp REQUIRED)

add_library(kvscope::httplib INTERFACE IMPORTED GLOBAL)
target_link_libraries(kvscope::httplib INTERFACE PkgConfig::KVSCOPE_HTTPLIB)

add_library(kvscope::zmq INTERFACE IMPORTED GLOBAL)
target_link_libraries(kvscope::zmq INTERFACE PkgConfig::KVSCOPE_LIBZMQ)
target_include_directories(kvscope::zmq INTERFACE ${KVSCOPE_CPPZMQ_INCLUDE})

add_library(kvscope::msgpack INTERFACE IMPORTED GLOBAL)
target_include_directories(kvscope::msgpack INTERFACE ${KVSCOPE_MSGPACK_INCLUDE})
