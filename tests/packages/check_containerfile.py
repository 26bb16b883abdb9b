#!/usr/bin/python3
"""A dry parse of deploy/Containerfile: no container engine runs here (and
Debian 12 has no hadolint), so this checks what a build would first trip on.

usage: check_containerfile.py SOURCE_DIR PKG_DIR DAEMON_ROOT
  PKG_DIR      the .debs cpack made
  DAEMON_ROOT  the rtraind .deb unpacked (dpkg -x)

Checks: every instruction is a known one with arguments; each stage is
FROM debian:12 (the release the packages' Depends come from), named stages
are defined before COPY --from uses them; each COPY source from the build
context exists in SOURCE_DIR; each file a RUN executes from /tmp was
COPYed there first; each .deb the final stage copies and installs matches
exactly one package cpack made, the rtraind one, and the build stage makes
it where it is copied from (cpack -B DIR); ENTRYPOINT is JSON naming a file
of that package; the USER's uid is made by a useradd in a RUN before it.
deploy/mpi/mpijob.yaml runs this image: its launcher line starts mpirun,
which a package the final stage installs provides (openmpi-bin), on the
ENTRYPOINT's rtraind; its workers run sshd (openssh-server) with a config
the image COPYs, on the port of their readiness probe and of the ssh
config the image gives mpirun's ssh, taking the keys the operator mounts at
sshAuthMountPath, the image user's home's .ssh; that user has a shell
(mpirun's ssh runs the remote rtraind through it)."""
import fnmatch
import json
import yaml  # python3-yaml: scripts/deps.sh --test
import os
import re
import shlex
import sys

KNOWN = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY",
         "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD",
         "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
fails = 0
checks = 0


def check(cond, what):
    global fails, checks
    checks += 1
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        fails += 1


def instructions(text):
    """(keyword, args) per instruction: comments dropped, continuation
    lines (a trailing backslash) joined."""
    out, cur = [], ""
    for line in text.split("\n"):
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue  # a comment line inside a continued instruction
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        kw, _, args = cur.partition(" ")
        out.append((kw, args.strip()))
        cur = ""
    assert not cur, "the file ends inside a continued instruction"
    return out


def sshd_option(text, name):
    m = re.search(r"^\s*%s\s+(\S+)" % name, text, re.M | re.I)
    return m.group(1) if m else None


def mpi_checks(src, final, entry):
    """deploy/mpi/mpijob.yaml against the final stage (module docstring)"""
    with open(os.path.join(src, "deploy", "mpi", "mpijob.yaml")) as f:
        job = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "MPIJob")
    specs = job["spec"]["mpiReplicaSpecs"]
    launch = [str(a) for a in specs["Launcher"]["template"]["spec"]["containers"][0]["command"]]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    runs = " && ".join(a for k, a in final if k == "RUN")
    pkgs = set(t for seg in runs.split("&&") if re.search(r"\bapt-get\s.*\binstall\b", seg)
               for t in shlex.split(seg) if not t.startswith("-"))
    # what the final stage COPYs from the build context: destination -> source
    copies = {}
    for kw, args in final:
        if kw == "COPY" and "--from=" not in args:
            w = shlex.split(args)
            copies[w[-1]] = w[0]
    check(launch[0] == "mpirun" and "openmpi-bin" in pkgs,
          "MPIJob launcher starts mpirun, the image installs openmpi-bin (%s)" % launch[0])
    check(entry in launch, "MPIJob launcher runs the image's rtraind %s" % entry)
    check("openssh-client" in pkgs, "the image installs ssh for mpirun's launch agent")
    wcmd = [str(a) for a in worker.get("command", [])]
    check(wcmd[:1] == ["/usr/sbin/sshd"] and "openssh-server" in pkgs,
          "MPIJob workers run sshd, the image installs openssh-server (%s)" % wcmd)
    conf = wcmd[wcmd.index("-f") + 1] if "-f" in wcmd[:-1] else None
    check(conf in copies and os.path.isfile(os.path.join(src, copies.get(conf, ""))),
          "the workers' sshd config %s is COPYed into the image from the repository" % conf)
    text = open(os.path.join(src, copies[conf])).read() if conf in copies else ""
    port = sshd_option(text, "Port")
    probe = worker.get("readinessProbe", {}).get("tcpSocket", {}).get("port")
    check(port is not None and str(probe) == port,
          "the workers' readiness probe is sshd's port (%s, %s)" % (probe, port))
    ssh = [d for d in copies if d.startswith("/etc/ssh/ssh_config.d/")]
    sport = (sshd_option(open(os.path.join(src, copies[ssh[0]])).read(), "Port")
             if ssh else None)
    check(sport == port, "mpirun's ssh reaches the workers' sshd port (%s, %s)" % (sport, port))
    home = re.search(r"useradd\b[^&]*--home-dir\s+(\S+)", runs)
    shell = re.search(r"useradd\b[^&]*--shell\s+(\S+)", runs)
    mount = job["spec"].get("sshAuthMountPath")
    check(home is not None and mount == home.group(1) + "/.ssh",
          "the operator mounts its ssh keys at the image user's ~/.ssh (%s)" % mount)
    keys = sshd_option(text, "AuthorizedKeysFile")
    check(keys is not None and mount is not None and keys.startswith(mount + "/"),
          "sshd takes the mounted keys (%s)" % keys)
    check(shell is not None and "nologin" not in shell.group(1) and "false" not in shell.group(1),
          "the image user has a shell for mpirun's ssh (%s)" % (shell and shell.group(1)))


def main():
    src, pkg_dir, root = sys.argv[1:4]
    path = os.path.join(src, "deploy", "Containerfile")
    ins = instructions(open(path).read())
    debs = sorted(f for f in os.listdir(pkg_dir) if f.endswith(".deb"))
    check(bool(debs), "cpack made packages: %s" % debs)
    for kw, args in ins:
        check(kw in KNOWN and bool(args), "%s is an instruction with arguments" % kw)
    stages = []  # [name, [(kw, args)]]
    for kw, args in ins:
        if kw == "FROM":
            w = args.split()
            name = w[2] if len(w) == 3 and w[1].upper() == "AS" else None
            check(w[0] in ("debian:12", "debian:12-slim"), "FROM %s is Debian 12" % w[0])
            stages.append([name, []])
        else:
            check(bool(stages), "%s comes after a FROM" % kw)
            stages[-1][1].append((kw, args))
    check(len(stages) == 2 and stages[0][0], "a named build stage and the final one")
    copied = set()
    for si, (name, body) in enumerate(stages):
        for kw, args in body:
            if kw in ("COPY", "ADD"):
                w = shlex.split(args)
                frm = [x for x in w if x.startswith("--from=")]
                w = [x for x in w if not x.startswith("--")]
                srcs, dest = w[:-1], w[-1]
                if frm:
                    st = frm[0].split("=", 1)[1]
                    names = [s[0] for s in stages[:si]]
                    check(st in names, "COPY --from=%s names an earlier stage" % st)
                    runs = " ".join(a for k, a in stages[names.index(st)][1]
                                    if k == "RUN") if st in names else ""
                    for s in srcs:
                        d, pat = os.path.split(s)
                        check(re.search(r"cpack\b.*-B\s+%s\b" % re.escape(d), runs) is not None,
                              "stage %s makes %s with cpack -B %s" % (st, s, d))
                        m = fnmatch.filter(debs, pat)
                        check(len(m) == 1 and m[0].startswith("rtraind_"),
                              "COPY %s matches the rtraind package (%s)" % (s, m))
                else:
                    for s in srcs:
                        check(os.path.exists(os.path.join(src, s)),
                              "COPY source %s exists in the build context" % s)
                        if dest.startswith("/tmp/"):
                            copied.add(dest if not dest.endswith("/") else
                                       dest + os.path.basename(s))
            if kw == "RUN":
                for exe in re.findall(r"(?:^|&&\s*)(/tmp/\S+)", args):
                    check(exe in copied, "RUN %s: COPYed before" % exe)
    final = stages[-1][1]
    runs = [a for k, a in final if k == "RUN"]
    installs = [t for a in runs for seg in a.split("&&")
                if re.search(r"\bapt-get\s.*\binstall\b", seg)
                for t in shlex.split(seg) if t.endswith(".deb")]
    check(bool(installs), "the final stage installs .debs: %s" % installs)
    for t in installs:
        m = fnmatch.filter(debs, os.path.basename(t))
        check(len(m) == 1 and m[0].startswith("rtraind_"),
              "apt-get install %s is the rtraind package (%s)" % (t, m))
    ep = [a for k, a in final if k == "ENTRYPOINT"]
    check(len(ep) == 1, "one ENTRYPOINT")
    if ep:
        exe = json.loads(ep[0])[0]
        check(os.path.isfile(os.path.join(root, exe.lstrip("/"))),
              "ENTRYPOINT %s is in the rtraind package" % exe)
    users = [a for k, a in final if k == "USER"]
    check(len(users) == 1, "one USER")
    if users:
        uid = users[0].split(":")[0]
        i = [a for k, a in final].index(users[0])
        before = " ".join(a for k, a in final[:i] if k == "RUN")
        check(re.search(r"useradd\b[^&]*--uid %s\b" % re.escape(uid), before) is not None,
              "USER %s is made by useradd before it" % uid)
    mpi_checks(src, final, json.loads(ep[0])[0] if ep else None)
    print("%d/%d checks passed" % (checks - fails, checks))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
