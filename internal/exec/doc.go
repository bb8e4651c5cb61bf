// Package exec runs dshd executions: it builds the child's environment
// (DESIGN §3), spawns `bash -c <command>` in its own process group, captures
// and spools its output, records it as a Job, and stops it on timeout,
// cancellation or shutdown through one kill path (SIGTERM the group, wait the
// grace, SIGKILL the group).
//
// A job is finished when its leader exits: descendants that escape into the
// background and keep the output pipes open cannot hang it. The executor
// owns its pipes (os/exec copies nothing), so the foreground path costs little
// beyond the fork and exec of bash itself.
package exec
