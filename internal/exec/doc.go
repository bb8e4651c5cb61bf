// Package exec is dshd's job table: it decides what may run, records each
// execution as a Job, and answers for it until retention forgets it. The
// processes themselves are run by package proc, which knows nothing of
// jobs; exec imports it, never the other way.
//
// What it owns, and where:
//
//   - the Executor (executor.go): options, caps (running jobs, background
//     jobs per agent), the table of jobs, retention, Cancel and Close;
//   - Reserve and Reservation.Start (reserve.go): validation, the cwd, the
//     job's id, its idempotency key and a slot under the caps before
//     anything slow runs; then the child's environment
//     (docs/design.md#child-environment, env.go) and the one call to
//     proc's Runner.Launch that starts the job's process;
//   - a Job (job.go): state, exit, usage, snapshots, waiting; its output
//     captured with head and tail in memory and the whole stream spooled
//     under the home (capture.go);
//   - idempotency keys, kept across a restart (idem.go);
//   - input, resize and signals on running jobs (interactive.go), passed
//     to the job's proc.Process;
//   - the running index and recovery after a crash (recover_linux.go):
//     what an earlier run left running is stopped and reported lost;
//   - helper processes such as hooks (RunProcess, process.go), through the
//     same runner.
//
// So a job's process is started in Reservation.Start (reserve.go) through
// proc.Runner.Launch, recorded in Executor's table (executor.go) and in the
// running index (recover_linux.go), and killed by proc.Process.Stop, which
// Cancel, the job's timeout, its limits and Close call.
//
// Linux only: on another system the build stops at linux_only.go, whose
// import path says so.
//
// Floor 3 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package exec
