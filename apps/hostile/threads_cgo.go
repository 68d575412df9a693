//go:build linux && cgo

package hostile

/*
#include <pthread.h>
#include <stdlib.h>

// gate is held for writing while threads are started; each waits on it.
static pthread_rwlock_t gate = PTHREAD_RWLOCK_INITIALIZER;

static void *park(void *arg) {
	pthread_rwlock_rdlock(&gate);
	pthread_rwlock_unlock(&gate);
	return 0;
}

// start_threads starts up to most threads, small stacks, each parked on
// the gate, then opens it; it returns how many it started and sets *err
// to pthread_create's error.
static int start_threads(int most, pthread_t *ids, int *err) {
	pthread_rwlock_wrlock(&gate);
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 << 10);
	int n = 0;
	*err = 0;
	for (; n < most; n++) {
		int e = pthread_create(&ids[n], &a, park, 0);
		if (e) {
			*err = e;
			break;
		}
	}
	pthread_attr_destroy(&a);
	pthread_rwlock_unlock(&gate);
	return n;
}

static void join_threads(pthread_t *ids, int n) {
	for (int i = 0; i < n; i++) {
		pthread_join(ids[i], 0);
	}
}
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// threads starts threads that wait, as a server's thread pool or a thread
// per connection does, until the kernel refuses one (EAGAIN: the cgroup's
// pids.max or the PID namespace's pid_max), then ends them all so that
// the spoke can report.
func threads(most int) Result {
	attack := fmt.Sprintf("%s %d", Threads, most)
	ids := C.malloc(C.size_t(most) * C.size_t(unsafe.Sizeof(C.pthread_t(0))))
	defer C.free(ids)
	var errno C.int
	n := int(C.start_threads(C.int(most), (*C.pthread_t)(ids), &errno))
	C.join_threads((*C.pthread_t)(ids), C.int(n))
	if errno == 0 {
		return Result{Attack: attack, Outcome: Succeeded, Detail: fmt.Sprintf("started %d threads", n)}
	}
	return judge(attack, fmt.Errorf("after %d threads: %w", n, os.NewSyscallError("pthread_create", unix.Errno(errno))), "", unix.EAGAIN)
}
