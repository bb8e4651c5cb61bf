// Package proc is dshd's process runner: it runs `bash -c <command>` as the
// leader of a process group of its own and owns everything between the
// fork and the reaping of that leader. It knows nothing of jobs: the job
// table (package exec) decides what runs and records it; proc runs it.
//
// What it owns, and where:
//
//   - the one spawn path, for jobs and helper processes (hooks) alike:
//     Runner.Launch with a Spec (runner.go, process_linux.go): pipes made
//     ahead (pipes_linux.go, ahead.go) or a pseudo-terminal, stdin, the
//     sandbox's start, clone3 into the job's cgroup, the leader's start
//     time from the clock (starttime_linux.go), the kernel's argument space
//     (argsize_linux.go);
//   - waiting without a thread per process: a pidfd in the poller
//     (wait_linux.go), the output drained after the leader exits;
//   - interactive input: Process.WriteInput, CloseInput, Resize and
//     SignalGroupNow (input_linux.go);
//   - the one kill path shared by timeout, cancel and shutdown:
//     Process.Stop (SIGTERM to every process of the group, the grace,
//     SIGKILL to all), and Runner.StopAll at shutdown (process_linux.go,
//     runner.go);
//   - containment (contain_linux.go): a cgroup v2 group per process,
//     spawned straight into it and ended with cgroup.kill, groups made
//     ahead (spares_linux.go), the v1 groups of hybrid hosts
//     (cgroupv1_linux.go); or, in group mode, the process group traced
//     through /proc with dshd as child subreaper (reap_linux.go), the
//     processes it adopts recorded for a next start (adopt_linux.go);
//   - limits and usage (limits_linux.go): the kernel's controllers where
//     delegated, a watcher where not, what a process used;
//   - descriptors: dshd's own marked close-on-exec at start, so a child
//     gets only 0-2 and its own pipes (fds_linux.go).
//
// testing.go shows the tests of the job table, which run processes through
// an Executor, what they check of the runner's state (the pipes and groups
// made ahead, the reaper, the limit watcher); nothing in production calls
// it.
//
// A process is finished when its leader exits: descendants that escape into
// the background and keep the output pipes open cannot hang it. The runner
// owns its pipes (os/exec copies nothing), so a spawn costs little beyond
// the fork and exec of bash itself.
//
// Linux only: on another system the build stops at linux_only.go, whose
// import path says so.
//
// Floor 2 of the layout (docs/design.md#floors): it imports only packages on the floors below.
package proc
