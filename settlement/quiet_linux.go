package settlement

import (
	"runtime"
	"sync"
	"syscall"
)

// quietNice is the nice value of the thread Quietly runs on: the lowest
// priority, which the kernel serves only with what nice-0 threads leave.
const quietNice = 19

// quiet counts the Quietly calls running and holds GOMAXPROCS as it was
// before the first.
var quiet struct {
	sync.Mutex
	running, procs int
}

// Quietly runs f on an OS thread of its own at nice 19, and waits for it:
// on 2 cores, a snapshot's encoding at the writer's priority takes one
// core for up to a second, which the writer's commits and nats-server
// then wait for. While f runs GOMAXPROCS is one higher, so that the P its
// thread holds while the kernel leaves it waiting is not one the writer's
// goroutines could have run on. f must not depend on the calling
// goroutine's thread.
func Quietly(f func()) {
	quiet.Lock()
	if quiet.running == 0 {
		quiet.procs = runtime.GOMAXPROCS(0)
	}
	quiet.running++
	runtime.GOMAXPROCS(quiet.procs + quiet.running)
	quiet.Unlock()
	defer func() {
		quiet.Lock()
		quiet.running--
		runtime.GOMAXPROCS(quiet.procs + quiet.running)
		quiet.Unlock()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the goroutine's thread, niced, exits with it
		// instead of going back to run other goroutines.
		runtime.LockOSThread()
		// Refused (a seccomp profile, say), f runs at the usual priority.
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), quietNice)
		f()
	}()
	<-done
}
