package gemm

import "syscall"

// osYield offers the thread's CPU to the other threads the operating system
// has ready to run (sched_yield), and returns at once when there are none.
func osYield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
