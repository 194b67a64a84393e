# Embeds every kernels_src/**/*.cuh into the library as a string table (path, contents).
function(chord_embed_kernels out_var src_dir)
  file(GLOB_RECURSE _cuh CONFIGURE_DEPENDS "${src_dir}/*.cuh")
  list(SORT _cuh)
  set(_out "${CMAKE_CURRENT_BINARY_DIR}/generated/embedded_kernel_sources.cpp")
  string(REPLACE ";" "|" _files "${_cuh}")
  add_custom_command(OUTPUT "${_out}"
    COMMAND ${CMAKE_COMMAND} -DSRC_DIR=${src_dir} -DOUT=${_out} "-DFILES=${_files}"
            -P "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_kernels_script.cmake"
    DEPENDS ${_cuh} "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/embed_kernels_script.cmake"
    COMMENT "Embedding kernel sources" VERBATIM)
  set(${out_var} "${_out}" PARENT_SCOPE)
endfunction()
