/* Calls made the way a C program makes them: in C an enum parameter may hold any int (in C++ building
 * such a value is already undefined, so the fuzzer cannot pass it from C++). */
#include "chordrt/chordrt.h"

const char* chord_fuzz_status_string(int status) { return chord_status_string((chord_status_t)status); }
