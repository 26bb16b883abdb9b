#!/usr/bin/python3
"""deploy/mpi's launch lines, run across hosts (tests/mpi/netns.sh, 5 hosts).

usage: netns.sh 5 test_deploy_netns.py RTRAIND RTRAIN MPIRUN

The MPIJob's launcher command and the Slurm batch script are run as written,
with only what a cluster would provide put in by this test bed:
  - the binaries' and secrets' paths point at this build and at a CA, server
    certificate (for rank 0's address) and tokens file made here; for the
    MPIJob each file must be a key of the Secret (deploy/k8s/secret.yaml)
    mounted where the worker container mounts it;
  - MPIJob: the MPI Operator's part, a hostfile of the 4 worker "pods"
    (hosts 1-4) in OMPI_MCA_orte_default_hostfile and a launch agent in
    place of its ssh (OMPI_MCA_plm_rsh_agent); the launcher runs on host 0;
  - Slurm: the batch script runs on the allocation's first node (host 1)
    with SLURM_* from its #SBATCH lines and an `srun` on PATH that starts
    its command with mpirun over the allocation (hosts 1-4); srun's own PMIx
    launch cannot run here, so the srun options are checked, not used.
Both also get OMPI_MCA_mpi_yield_when_idle=1 (the hosts share this
machine's cores; see netns.sh). The MCA settings of the lines themselves
(btl self,vader,tcp) stay as written, with no interface named: on a host
with one network interface they must find it.

Then, from host 0 over TLS with a token: `rtrain info` lists 4 replicas,
rank i on worker i; `rtrain fit` trains iris; its weights equal, bit for
bit, those of a single-process rtraind with the same --deterministic-reduce
(the micro-shard reduce makes the sums independent of the replica count).
"""
import atexit
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

import yaml  # python3-yaml: scripts/deps.sh --test

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DEPLOY = os.path.join(ROOT, 'deploy')
IRIS = os.path.join(ROOT, 'examples', 'iris')
# the MPIJob runs deploy/Containerfile's image: rtraind where its .deb puts it
# (tests/packages/check_containerfile.py checks the rest of the image side)
IMAGE_RTRAIND = '/usr/sbin/rtraind'
fails = []


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what, flush=True)
    if not cond:
        fails.append(what)
    return cond


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, **kw)


def make_pki(d, ip):
    ec = '-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'
    sh(f"cd {d} && exec >openssl.log 2>&1 && "
       f"printf 'subjectAltName=IP:{ip}\\n' > san.ext && "
       f"openssl req -x509 {ec} -keyout ca.key -out ca.pem -days 2 -subj /CN=rtrain-test-ca && "
       f"openssl req {ec} -keyout srv.key -out srv.csr -subj /CN=rtraind && "
       f"openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
       f"  -out srv.pem -days 2 -extfile san.ext")


def start(argv, env, what):
    """argv in its own process group, its output read by a thread (a full
    pipe would stall the job) until rank 0's listening line or the job's
    end. Returns (proc, the port or None)."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    p.seen, p.port, p.listening = [], None, threading.Event()

    def read():
        for line in p.stdout:
            p.seen.append(line)
            m = re.match(r'rtraind listening on .*:(\d+)', line)
            if m and p.port is None:
                p.port = int(m.group(1))
                p.listening.set()
        p.listening.set()  # the job ended
    p.reader = threading.Thread(target=read, daemon=True)
    p.reader.start()
    # a bound on a hung start, not a speed check
    if not p.listening.wait(180):
        print('(no listening line in 180 s)')
    if p.port is None:
        print(''.join(p.seen[-30:]))
    check(p.port is not None, f'{what}: rank 0 listens')
    return p, p.port


def stop(p, what):
    """SIGTERM to the job's process group (mpirun passes it to the ranks)."""
    os.killpg(p.pid, signal.SIGTERM)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        check(False, f'{what}: the job ended within 60 s of SIGTERM')
        print(''.join(p.seen[-30:]))
    p.reader.join()


def client_checks(what, rtrain, addr, tls, workers, ref_weights, tmp, micro):
    info = subprocess.run([rtrain, 'info', '--server', addr] + tls, capture_output=True,
                          text=True)
    check(info.returncode == 0, f'{what}: rtrain info over TLS with a token' +
          ('' if info.returncode == 0 else f' (exit {info.returncode}: {info.stderr[-200:]})'))
    out = info.stdout
    check(re.search(r'^replicas: 4 \(MPI, deterministic reduce\)', out, re.M) is not None,
          f'{what}: info lists 4 replicas with the deterministic reduce')
    hosts = re.findall(r'^  rank (\d+): (\S+)', out, re.M)
    check(hosts == [(str(i), w) for i, w in enumerate(workers)],
          f'{what}: rank i on worker i {workers}: {hosts}')
    check(re.search(rf'^deterministic reduce: {micro} micro-shards', out, re.M) is not None,
          f'{what}: --deterministic-reduce {micro} in effect')
    w = os.path.join(tmp, f'{what}.bin')
    fit = subprocess.run([rtrain, 'fit', '--server', addr] + tls + FIT + ['--save-weights', w],
                         capture_output=True, text=True)
    check(fit.returncode == 0, f'{what}: rtrain fit' +
          ('' if fit.returncode == 0 else f' (exit {fit.returncode}: {fit.stderr[-300:]})'))
    got = open(w, 'rb').read() if os.path.exists(w) else b''
    check(len(got) > 0 and got == ref_weights,
          f'{what}: iris weights over 4 hosts equal one process\'s ({len(got)} bytes)')


FIT = ['--model', os.path.join(IRIS, 'model.json'),
       '--data', os.path.join(IRIS, 'train_shuffled.csv'),
       '--val', os.path.join(IRIS, 'val_shuffled.csv'),
       '--loss', 'sparse_categorical_crossentropy', '--optimizer', 'adam', '--lr', '0.02',
       '--batch-size', '16', '--epochs', '3', '--seed', '1', '--steps-per-call', '8']


def flag(args, name):
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def main():
    rtraind, rtrain, mpirun = sys.argv[1:4]
    addrs = os.environ['RT_NETNS_ADDRS'].split()
    pre, ndir = os.environ['RT_NETNS_PREFIX'], os.environ['RT_NETNS_DIR']
    agent = os.path.join(ndir, 'agent')
    if not check(len(addrs) == 5, f'5 hosts (launcher + 4 workers), have {len(addrs)}'):
        return 1
    workers = [f'{pre}h{i}' for i in range(1, 5)]
    tmp = tempfile.mkdtemp(prefix='rt-deploy-netns-')
    atexit.register(shutil.rmtree, tmp, True)  # also when a step raises
    make_pki(tmp, addrs[1])
    tok = subprocess.run([rtraind, '--new-token', 'alice'], capture_output=True, text=True,
                         check=True)
    token = tok.stderr.strip().rsplit(' ', 1)[1]
    with open(os.path.join(tmp, 'token'), 'w') as f:
        f.write(token + '\n')
    files = {'cert': open(os.path.join(tmp, 'srv.pem')).read(),
             'key': open(os.path.join(tmp, 'srv.key')).read(),
             'tokens': tok.stdout}
    tls = ['--tls-ca', os.path.join(tmp, 'ca.pem'), '--token-file', os.path.join(tmp, 'token')]
    whost = os.path.join(tmp, 'workers')
    with open(whost, 'w') as f:
        f.writelines(f'{a} slots=1\n' for a in addrs[1:])
    base_env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle='1')
    for k in list(base_env):
        if k.startswith('OMPI_MCA_') and k != 'OMPI_MCA_mpi_yield_when_idle':
            del base_env[k]

    # ---- the MPIJob
    with open(os.path.join(DEPLOY, 'mpi', 'mpijob.yaml')) as f:
        job = next(d for d in yaml.safe_load_all(f) if d and d.get('kind') == 'MPIJob')
    with open(os.path.join(DEPLOY, 'k8s', 'secret.yaml')) as f:
        secrets = {d['metadata']['name']: d for d in yaml.safe_load_all(f) if d}
    specs = job['spec']['mpiReplicaSpecs']
    cmd = [str(a) for a in specs['Launcher']['template']['spec']['containers'][0]['command']]
    wpod = specs['Worker']['template']['spec']
    vols = {v['name']: v['secret']['secretName'] for v in wpod.get('volumes', [])
            if 'secret' in v}
    mounts = {m['mountPath']: vols.get(m['name'])
              for m in wpod['containers'][0].get('volumeMounts', [])}
    froot = os.path.join(tmp, 'mpijob-root')
    for mp, sec in mounts.items():
        check(sec in secrets, f'MPIJob: the volume at {mp} is a Secret of deploy/k8s ({sec})')
        for key in (secrets.get(sec, {}).get('stringData') or {}):
            kind = 'key' if key.endswith('.key') else 'cert' if key.endswith('.crt') else key
            os.makedirs(froot + mp, exist_ok=True)
            with open(os.path.join(froot + mp, key), 'w') as f:
                f.write(files.get(kind, ''))
    argv = []
    for a in cmd:
        if a == 'mpirun':
            a = mpirun
        elif a == IMAGE_RTRAIND:
            a = rtraind
        elif any(a.startswith(mp + '/') for mp in mounts):
            check(os.path.isfile(froot + a),
                  f'MPIJob: {a} is a key of the Secret mounted at {os.path.dirname(a)}')
            a = froot + a
        argv.append(a)
    dargs = cmd[cmd.index(IMAGE_RTRAIND) + 1:]
    micro = flag(dargs, '--deterministic-reduce')
    port = int(flag(dargs, '--listen').rsplit(':', 1)[1])
    env = dict(base_env, OMPI_MCA_orte_default_hostfile=whost, OMPI_MCA_plm_rsh_agent=agent)

    # the reference: one process, the same reduce (loopback on host 0)
    ref, rport = start([rtraind, '--listen', '127.0.0.1:0', '--deterministic-reduce', micro,
                        '--log-level', 'warn'], base_env, 'reference')
    refw = os.path.join(tmp, 'ref.bin')
    if rport:
        r = subprocess.run([rtrain, 'fit', '--server', f'127.0.0.1:{rport}'] + FIT +
                           ['--save-weights', refw], capture_output=True, text=True)
        check(r.returncode == 0, 'reference fit' +
              ('' if r.returncode == 0 else f' (exit {r.returncode}: {r.stderr[-300:]})'))
    stop(ref, 'reference')
    refbytes = open(refw, 'rb').read() if os.path.exists(refw) else None

    print('MPIJob launcher:', ' '.join(shlex.quote(a) for a in argv), flush=True)
    p, got = start(argv, env, 'MPIJob')
    if got:
        check(got == port, f'MPIJob: rank 0 serves on --listen\'s port {port}')
        client_checks('MPIJob', rtrain, f'{addrs[1]}:{got}', tls, workers, refbytes, tmp, micro)
    stop(p, 'MPIJob')

    # ---- the Slurm batch script
    with open(os.path.join(DEPLOY, 'mpi', 'rtraind.sbatch')) as f:
        text = f.read()
    sb = dict(re.findall(r'^#SBATCH --([a-z-]+)=(\S+)', text, re.M))
    ntasks = int(sb['nodes']) * int(sb['ntasks-per-node'])
    check(ntasks == 4, f'sbatch: 4 tasks ({sb})')
    sroot = os.path.join(tmp, 'sbatch-root')
    paths = sorted(set(re.findall(r'(/etc/rtrain/\S+)', text)))
    for pth in paths:
        kind = 'key' if pth.endswith('.key') else 'tokens' if 'token' in pth else 'cert'
        os.makedirs(os.path.dirname(sroot + pth), exist_ok=True)
        with open(sroot + pth, 'w') as f:
            f.write(files[kind])
        text = text.replace(pth, sroot + pth)
    text = text.replace('/usr/local/bin/rtraind', rtraind)
    script = os.path.join(tmp, 'rtraind.sbatch')
    with open(script, 'w') as f:
        f.write(text)
    bindir = os.path.join(tmp, 'bin')
    os.makedirs(bindir)
    # srun OPTIONS... CMD ARGS...: the options are Slurm's (checked: PMIx,
    # since OpenMPI under srun needs it); the command runs on every node of
    # the allocation through mpirun.
    with open(os.path.join(bindir, 'srun'), 'w') as f:
        f.write('#!/bin/sh\n'
                'pmix=0\n'
                'while [ $# -gt 0 ]; do case $1 in\n'
                '  --mpi=pmix) pmix=1; shift ;;\n'
                '  --*) shift ;;\n'
                '  *) break ;;\n'
                'esac; done\n'
                '[ $pmix = 1 ] || { echo "srun: OpenMPI needs --mpi=pmix" >&2; exit 1; }\n'
                f'exec {mpirun} --allow-run-as-root -n "$SLURM_NTASKS" '
                '--hostfile "$RT_SLURM_HOSTFILE" --mca plm_rsh_agent "$RT_SLURM_AGENT" "$@"\n')
    os.chmod(os.path.join(bindir, 'srun'), 0o755)
    senv = dict(base_env, PATH=bindir + ':' + os.environ['PATH'], SLURM_NTASKS=str(ntasks),
                SLURM_CPUS_PER_TASK=sb['cpus-per-task'], SLURM_JOB_NUM_NODES=sb['nodes'],
                RT_SLURM_HOSTFILE=whost, RT_SLURM_AGENT=agent)
    # the batch script runs on the allocation's first node
    p, got = start([agent, addrs[1], 'exec bash ' + shlex.quote(script)], senv, 'sbatch')
    banner = [ln for ln in p.seen if ln.startswith('rtraind rank 0 on ')]
    check(banner == [f'rtraind rank 0 on {workers[0]}:7070\n'],
          f'sbatch: its banner names rank 0\'s node ({banner})')
    if got:
        client_checks('sbatch', rtrain, f'{addrs[1]}:{got}', tls, workers, refbytes, tmp,
                      re.search(r'--deterministic-reduce (\d+)', text).group(1))
    stop(p, 'sbatch')
    print(f'{len(fails)} failure(s)')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
