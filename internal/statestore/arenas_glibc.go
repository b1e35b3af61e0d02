//go:build linux && cgo

package statestore

/*
#include <stdlib.h>
#include <malloc.h>

static void holdfast_limit_arenas(void) {
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
	if (getenv("MALLOC_ARENA_MAX") == NULL) {
		mallopt(M_ARENA_MAX, 2);
	}
#endif
}
*/
import "C"

// limitMallocArenas keeps the C allocator to two arenas unless the
// environment sets MALLOC_ARENA_MAX. Pebble allocates its block cache and
// memtables with C malloc when cgo is on, from whichever thread runs the
// goroutine, and glibc gives threads arenas of their own (up to eight per
// CPU) whose freed memory the others cannot reuse, so it stays resident.
func limitMallocArenas() { C.holdfast_limit_arenas() }
