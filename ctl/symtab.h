// A function the program defines and does not export (symtab.c): a leaf of
// the control library, with nothing of the core's.
#pragma once

#include <stddef.h>

// The address of the function `name` in the running program, from its
// symbol table or its debug file's; NULL when neither names it as a function
// in the program's text. `where` gets the file it was found in.
void* ctl_find_own_function(const char* name, char* where, size_t where_len);
