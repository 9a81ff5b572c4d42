# Writes OUT, a C++ file that holds IN's text as `minfer::server::NAME` (the chat page is
# served from the binary: nothing to install beside it).
file(READ "${IN}" content)
if(content MATCHES "\\)minfer_embedded\"")
  message(FATAL_ERROR "${IN} holds the raw string's end marker")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by embed.cmake: edit that file, not this one.\nnamespace minfer::server {\nextern const char ${NAME}[];\nconst char ${NAME}[] = R\"minfer_embedded(${content})minfer_embedded\";\n}\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
