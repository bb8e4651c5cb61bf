#!/usr/bin/env python3
"""Hand-written mutants of the invariants that matter most, each to be caught
by its package's tests (make mutants). Each mutant rewrites one place, runs
the package's tests, and puts the file back; a mutant the tests let live
fails the run. gremlins (make mutate) covers the same packages with
mechanical mutations; these are the realistic bugs gremlins cannot write.

Usage: scripts/mutants.py [ID ...]   (no ID: all of them)
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (id, what the bug is, file, old, new, package, the test that must catch it)
MUTANTS = [
    ("W1", "an apply proceeds while a job of its agents runs", "internal/workspace/apply.go",
     '\tif n > 0 {\n\t\treturn fmt.Errorf("%w: agents %s have', '\tif n > 1 {\n\t\treturn fmt.Errorf("%w: agents %s have',
     "workspace", "TestApplyNeedsItsWritersStill"),
    ("W2", "an apply's target may hold the dshd home", "internal/workspace/apply.go",
     "if beneath.Within(real, p) || beneath.Within(p, real) {", "if beneath.Within(real, p) {",
     "workspace", "TestApplyNeverIntoTheHomeThroughALinkOnTheWay"),
    ("W3", "an apply's target may stand above another agent's workspace", "internal/workspace/apply.go",
     "!(beneath.Within(real, o.Base) || beneath.Within(o.Base, real))", "!(beneath.Within(real, o.Base))",
     "workspace", "TestApplyNeverAboveAWorkspace"),
    ("W4", "a failed apply is not rolled back", "internal/workspace/apply.go",
     "if rerr := rollback(j, sfd, target); rerr != nil {", "if rerr := error(nil); rerr != nil {",
     "workspace", "TestApplyCommitFailureRollsBack"),
    ("W5", "a layer's entry is described through its link", "internal/workspace/beneath_linux.go",
     "unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)", "unix.Fstatat(dfd, name, &st, 0)",
     "workspace", "TestApplyCopiesLinksAsLinks"),
    ("W6", "a layer's file is opened through links", "internal/workspace/beneath_linux.go",
     "fd, err := openat2(t.fd, rel, unix.O_RDONLY|unix.O_NOFOLLOW, 0)", "fd, err := beneath.Openat2(t.fd, rel, unix.O_RDONLY, 0, 0)",
     "workspace", "TestTreeOpenRefusesLinks"),
    ("W7", "only the applying agent's own base is refused", "internal/workspace/apply.go",
     "\t\tif id != agent {\n\t\t\tt.close()", "\t\tif id == agent {\n\t\t\tt.close()",
     "workspace", "TestApplyNeverAboveAWorkspace"),
    ("W8", "the home named by a link is not protected as what it resolves to", "internal/workspace/apply.go",
     "err == nil && r != p {", "err == nil && r == p {",
     "workspace", "TestApplyNeverIntoTheHomeNamedByALink"),
    ("W9", "a failed apply does not put back the first thing it deleted", "internal/workspace/apply.go",
     "for i := len(j.Deletes) - 1; i >= 0; i-- {", "for i := len(j.Deletes) - 1; i > 0; i-- {",
     "workspace", "TestApplyDeleteFailureRollsBack"),
    ("B1", "the containment check of names lets .. out", "internal/beneath/within.go",
     'rel != ".." && ', "", "beneath", "TestWithin"),
    ("N1", "a wildcard matches without the dot", "internal/netallow/list.go",
     'return strings.HasSuffix(host, "."+e.Host)\n\t}\n\treturn host == e.Host', 'return strings.HasSuffix(host, e.Host)\n\t}\n\treturn host == e.Host',
     "netallow", "TestMatch"),
    ("N2", "an entry's port is not checked", "internal/netallow/list.go",
     "if e.Addr.IsValid() || (e.Port != 0 && e.Port != port) {", "if e.Addr.IsValid() {",
     "netallow", "TestMatch"),
    ("N3", "a NAT64 address is not judged by the IPv4 address it carries", "internal/netallow/addr.go",
     '\t\tcase netip.MustParsePrefix("64:ff9b::/96").Contains(a):\n\t\t\treturn Restricted(netip.AddrFrom4([4]byte(b[12:16])))\n', "",
     "netallow", "TestRestricted"),
    ("N4", "a child's wildcard is covered by any wildcard", "internal/netallow/list.go",
     "|| (e.Wildcard && e.Host == o.Host)", "|| e.Wildcard", "netallow", "TestWithin"),
    ("U1", "a login code can be redeemed twice", "internal/uiauth/uiauth.go",
     "\texp, ok := s.codes[d]\n\tdelete(s.codes, d)\n", "\texp, ok := s.codes[d]\n",
     "uiauth", "TestCodeOnceAndExpiry"),
    ("U2", "a session's key is not checked", "internal/uiauth/uiauth.go",
     "subtle.ConstantTimeCompare(v.key[:], k[:]) != 1", "subtle.ConstantTimeCompare(k[:], k[:]) != 1",
     "uiauth", "TestCodeOnceAndExpiry"),
    ("U3", "an expired session still passes", "internal/uiauth/uiauth.go",
     "if !ok || !now.Before(v.expires) || subtle", "if !ok || now.Before(now) || subtle",
     "uiauth", "TestCodeOnceAndExpiry"),
    ("U4", "an expired login code is still redeemed", "internal/uiauth/uiauth.go",
     "if !ok || !now.Before(exp) {", "if !ok || !now.Before(exp.Add(1<<62)) {",
     "uiauth", "TestCodeOnceAndExpiry"),
]


def main(only):
    lived = 0
    for mid, what, rel, old, new, pkg, test in MUTANTS:
        if only and mid not in only:
            continue
        path = os.path.join(ROOT, rel)
        with open(path) as f:
            src = f.read()
        if src.count(old) != 1:
            print(f"{mid} {what}: the place to mutate is not found once in {rel}; update scripts/mutants.py")
            lived += 1
            continue
        try:
            with open(path, "w") as f:
                f.write(src.replace(old, new))
            r = subprocess.run(["go", "test", "-count=1", "-timeout", "300s", "./internal/" + pkg],
                               cwd=ROOT, capture_output=True, text=True)
        finally:
            with open(path, "w") as f:
                f.write(src)
        out = r.stdout + r.stderr
        caught = r.returncode != 0 and f"--- FAIL: {test} " in out
        print(f"{mid} {'caught' if caught else 'LIVED'} by {test}: {what} ({rel})", flush=True)
        if not caught:
            lived += 1
            print("\n".join(out.splitlines()[-15:]))
    return 1 if lived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
