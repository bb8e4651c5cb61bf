// Package exec runs dshd executions: it builds the child's environment
// (docs/design.md#child-environment), spawns `bash -c <command>` in its own
// process group, captures and spools its output, records it as a Job, and stops it on timeout,
// cancellation or shutdown through one kill path (SIGTERM the group, wait the
// grace, SIGKILL the group).
//
// Two types split the work. The runner (runner.go, with the Linux process
// code in proc_linux.go) runs one process group and knows nothing of jobs;
// jobs and helper processes such as hooks go through its one spawn path.
// Executor is the job table: caps, idempotency, records and retention.
//
// dshd is Linux only: the process code uses Linux-only calls (pipe2,
// F_SETPIPE_SZ). On another system the build stops with an import of
// "dshd/is-Linux-only" (linux_only.go), so the failure names the reason.
//
// A job is finished when its leader exits: descendants that escape into the
// background and keep the output pipes open cannot hang it. The executor
// owns its pipes (os/exec copies nothing), so the foreground path costs little
// beyond the fork and exec of bash itself.
package exec
