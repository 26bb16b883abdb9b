#!/usr/bin/python3
"""deploy/ against the daemon it deploys.

usage: test_deploy.py RTRAIND

Parses every Kubernetes manifest (python3-yaml), the systemd unit, its
environment file and the Containerfile; checks every daemon flag they use
against `rtraind --help`, and their values by running
`rtraind ARGS... --version` (getopt reads every flag before --version, so a
bad value exits 2); checks that the environment file documents every
option; checks the unit's hardening and that its stop timeout covers the
drain and grace periods; and checks that the manifests agree with each
other (selectors, ports, probes on the health service, Secrets, the PVC).
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:
    print('SKIP: python3-yaml is not installed (scripts/deps.sh --test installs it)')
    sys.exit(77)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DEPLOY = os.path.join(ROOT, 'deploy')
HEALTH_SERVICES = {'', 'rtrain.v1.Trainer'}  # what rtraind's health service knows
fails = []


def check(cond, what):
    print(('ok   ' if cond else 'FAIL ') + what)
    if not cond:
        fails.append(what)


def flags_of(args):
    """Flag names in an argument list: --name or --name=value."""
    return [a[2:].split('=', 1)[0] for a in args if a.startswith('--')]


def value_of(args, flag):
    for i, a in enumerate(args):
        if a == f'--{flag}' and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(f'--{flag}='):
            return a.split('=', 1)[1]
    return None


def port_of(addr):
    return int(addr.rsplit(':', 1)[1]) if addr else None


def parse_unit(path):
    """systemd unit: {section: [(key, value), ...]}; keys may repeat."""
    out, sec = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in '#;':
                continue
            m = re.match(r'\[(.+)\]$', line)
            if m:
                sec = m.group(1)
                out.setdefault(sec, [])
                continue
            k, _, v = line.partition('=')
            out[sec].append((k.strip(), v.strip()))
    return out


def unit_get(unit, sec, key):
    vals = [v for k, v in unit.get(sec, []) if k == key]
    return vals[-1] if vals else None


def parse_env(path):
    env, documented = {}, []
    with open(path) as f:
        for line in f:
            if line.startswith('#'):
                documented += re.findall(r'(?<![\w-])--([a-z0-9][a-z0-9-]*)', line)
                continue
            line = line.strip()
            if line and not line.startswith('#') and '=' in line:
                k, _, v = line.partition('=')
                env[k.strip()] = v.strip()
    return env, documented


def ms_of(s):
    """systemd time span ("45", "45s", "2min") in ms."""
    m = re.match(r'^(\d+)\s*(ms|s|min)?$', s)
    n, unit = int(m.group(1)), m.group(2) or 's'
    return n * {'ms': 1, 's': 1000, 'min': 60000}[unit]


def daemon_accepts(rtraind, args, what):
    r = subprocess.run([rtraind, *args, '--version'], capture_output=True, text=True)
    check(r.returncode == 0 and r.stdout.startswith('rtraind '),
          f'{what}: rtraind parses every value ({r.stderr.strip() or "exit 0"})')


def main():
    rtraind = sys.argv[1]
    help_text = subprocess.run([rtraind, '--help'], capture_output=True, text=True,
                               check=True).stdout
    known = set(re.findall(r'^\s+--([a-z0-9-]+)', help_text, re.M))
    check({'listen', 'http-listen', 'metrics-listen', 'drain-ms', 'log-format'} <= known,
          f'--help lists the daemon flags ({len(known)} found)')

    def flags_known(args, what):
        unknown = [f for f in flags_of(args) if f not in known]
        check(not unknown, f'{what}: every flag is in rtraind --help {unknown or ""}')

    # ---- the environment file and the systemd unit
    env, documented = parse_env(os.path.join(DEPLOY, 'rtraind.env'))
    opts = shlex.split(env.get('RTRAIND_OPTS', ''))
    check(len(opts) > 0, 'rtraind.env sets RTRAIND_OPTS')
    flags_known(opts, 'rtraind.env RTRAIND_OPTS')
    daemon_accepts(rtraind, opts, 'rtraind.env RTRAIND_OPTS')
    flags_known(['--' + d for d in documented], 'rtraind.env comments')
    missing = sorted(known - set(documented) - {'help', 'version'})
    check(not missing, f'rtraind.env documents every option {missing or ""}')

    unit_path = os.path.join(DEPLOY, 'rtraind.service')
    unit = parse_unit(unit_path)
    svc = 'Service'
    exec_start = shlex.split(unit_get(unit, svc, 'ExecStart') or '')
    check(exec_start and exec_start[0].endswith('/rtraind'), f'ExecStart runs rtraind {exec_start}')
    args = []
    for a in exec_start[1:]:
        args += opts if a in ('$RTRAIND_OPTS', '${RTRAIND_OPTS}') else [a]
    flags_known(args, 'rtraind.service ExecStart')
    for key, want in (('DynamicUser', 'yes'), ('ProtectSystem', 'strict'),
                      ('NoNewPrivileges', 'yes'), ('PrivateTmp', 'yes'),
                      ('KillSignal', 'SIGTERM')):
        check(unit_get(unit, svc, key) == want, f'unit: {key}={want}')
    check(bool(unit_get(unit, svc, 'StateDirectory')), 'unit: StateDirectory is set')
    check(re.match(r'^\d+[KMGT]?$', unit_get(unit, svc, 'MemoryMax') or '') is not None,
          f'unit: MemoryMax is a size ({unit_get(unit, svc, "MemoryMax")})')
    drain = int(value_of(args, 'drain-ms') or 0)
    grace = int(value_of(args, 'grace-ms') or 5000)
    stop = ms_of(unit_get(unit, svc, 'TimeoutStopSec') or '90')
    check(stop > drain + grace, f'unit: TimeoutStopSec {stop} ms > drain {drain} + grace {grace}')
    # systemd-analyze: package systemd (scripts/deps.sh --test installs it)
    analyze = shutil.which('systemd-analyze')
    check(analyze is not None, 'systemd-analyze is installed (scripts/deps.sh --test)')
    if analyze:
        with tempfile.TemporaryDirectory() as tmp:
            text = open(unit_path).read().replace(exec_start[0], os.path.abspath(rtraind))
            path = os.path.join(tmp, 'rtraind.service')
            with open(path, 'w') as f:
                f.write(text)
            r = subprocess.run([analyze, 'verify', path], capture_output=True, text=True)
            check(r.returncode == 0, f'systemd-analyze verify {r.stderr.strip()}')

    # ---- the Containerfile's default command
    with open(os.path.join(DEPLOY, 'Containerfile')) as f:
        docker = f.read()
    # CMD ["..", ..] may continue over lines ending in a backslash.
    joined = re.sub(r'\\\n\s*', ' ', docker)
    cmd = json.loads(re.search(r'^CMD (\[.*\])$', joined, re.M).group(1))
    flags_known(cmd, 'Containerfile CMD')
    daemon_accepts(rtraind, cmd, 'Containerfile CMD')
    exposed = {int(p) for line in re.findall(r'^EXPOSE (.+)$', docker, re.M)
               for p in line.split()}
    check(port_of(value_of(cmd, 'listen')) in exposed, f'Containerfile EXPOSEs the gRPC port {exposed}')

    # ---- Kubernetes
    k8s = os.path.join(DEPLOY, 'k8s')
    files = sorted(glob.glob(os.path.join(k8s, '*.yaml')))
    docs = {}
    for path in files:
        with open(path) as f:
            try:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
            except yaml.YAMLError as e:
                check(False, f'{os.path.basename(path)} parses: {e}')
                continue
        check(all('apiVersion' in d and 'kind' in d for d in loaded),
              f'{os.path.basename(path)}: {len(loaded)} object(s), each with apiVersion and kind')
        for d in loaded:
            docs.setdefault(d['kind'], []).append(d)
    kust = docs.get('Kustomization', [{}])[0]
    listed = set(kust.get('resources', []))
    others = {os.path.basename(p) for p in files} - {'kustomization.yaml'}
    check(listed == others, f'kustomization lists every manifest ({sorted(listed)})')

    sts = docs.get('StatefulSet', [])
    check(len(sts) == 1, 'one StatefulSet')
    if not sts:
        return 1
    sts = sts[0]
    spec = sts['spec']
    pod = spec['template']['spec']
    labels = spec['template']['metadata']['labels']
    check(spec['selector']['matchLabels'].items() <= labels.items(),
          'the StatefulSet selector matches its pod labels')
    ctr = [c for c in pod['containers'] if 'rtraind' in c['image']]
    check(len(ctr) == 1, 'one rtraind container')
    ctr = ctr[0]
    cargs = [str(a) for a in ctr.get('command', [])[1:] + ctr.get('args', [])]
    flags_known(cargs, 'StatefulSet container args')
    daemon_accepts(rtraind, cargs, 'StatefulSet container args')
    ports = {p['name']: p['containerPort'] for p in ctr['ports']}
    grpc_port = port_of(value_of(cargs, 'listen'))
    check(ports.get('grpc') == grpc_port, f'container port grpc = --listen port {grpc_port}')
    # --metrics-listen is the old name of --http-listen
    http = value_of(cargs, 'http-listen') or value_of(cargs, 'metrics-listen')
    check(ports.get('metrics') == port_of(http), 'container port metrics = --http-listen port')
    for probe in ('livenessProbe', 'readinessProbe'):
        pr = ctr.get(probe, {})
        check('grpc' in pr and pr['grpc'].get('port') == grpc_port,
              f'{probe} is a gRPC probe on the daemon port')
        check(pr.get('grpc', {}).get('service', '') in HEALTH_SERVICES,
              f'{probe} asks a service the health server knows')
    sd = int(value_of(cargs, 'drain-ms') or 0) + int(value_of(cargs, 'grace-ms') or 5000)
    check(pod.get('terminationGracePeriodSeconds', 30) * 1000 > sd,
          f'terminationGracePeriodSeconds covers drain + grace ({sd} ms)')
    mounts = {m['name']: m['mountPath'] for m in ctr.get('volumeMounts', [])}
    claims = [c['metadata']['name'] for c in spec.get('volumeClaimTemplates', [])]
    check(len(claims) == 1 and claims[0] in mounts,
          f'a PVC (volumeClaimTemplates) is mounted as the state directory {mounts}')
    secrets = {s['metadata']['name']: s for s in docs.get('Secret', [])}
    vols = {v['name']: v for v in pod.get('volumes', [])}
    used = {v['secret']['secretName'] for v in vols.values() if 'secret' in v}
    check(used and used <= set(secrets), f'mounted Secrets are defined {sorted(used)}')
    check(any(s.get('type') == 'kubernetes.io/tls' for s in secrets.values()),
          'a TLS Secret (kubernetes.io/tls)')
    check(any('tokens' in (s.get('stringData') or s.get('data') or {})
              for s in secrets.values()), 'a Secret with the tokens file')
    for name in mounts:
        check(name in vols or name in claims, f'volume mount {name} has a volume')

    services = docs.get('Service', [])
    check(any(s['metadata']['name'] == spec['serviceName'] and s['spec'].get('clusterIP') == 'None'
              for s in services), 'the StatefulSet serviceName is a headless Service')
    for s in services:
        n = s['metadata']['name']
        check(s['spec']['selector'].items() <= labels.items(), f'Service {n} selects the pods')
        for p in s['spec']['ports']:
            tp = p.get('targetPort', p['port'])
            check(tp in ports or tp in ports.values(),
                  f'Service {n} port {p["name"]} targets a container port ({tp})')
    # ---- deploy/mpi: the MPI Operator's launcher and the Slurm batch script
    with open(os.path.join(DEPLOY, 'mpi', 'mpijob.yaml')) as f:
        mdocs = [d for d in yaml.safe_load_all(f) if d is not None]
    jobs = [d for d in mdocs if d.get('kind') == 'MPIJob']
    check(len(jobs) == 1, 'deploy/mpi/mpijob.yaml: one MPIJob')
    if jobs:
        specs = jobs[0]['spec']['mpiReplicaSpecs']
        cmd = [str(a) for a in specs['Launcher']['template']['spec']['containers'][0]['command']]
        check(cmd[0] == 'mpirun' and any(a.endswith('/rtraind') for a in cmd),
              'MPIJob launcher runs mpirun ... rtraind')
        dargs = cmd[next(i for i, a in enumerate(cmd) if a.endswith('/rtraind')) + 1:]
        flags_known(dargs, 'MPIJob rtraind args')
        daemon_accepts(rtraind, dargs, 'MPIJob rtraind args')
        n = int(cmd[cmd.index('-n') + 1])
        check(specs['Worker']['replicas'] == n, f'MPIJob: mpirun -n {n} = worker replicas')
    with open(os.path.join(DEPLOY, 'mpi', 'rtraind.sbatch')) as f:
        text = f.read().replace('\\\n', ' ')
    srun = [ln for ln in text.splitlines() if 'srun' in ln and not ln.startswith('#')]
    check(len(srun) == 1, 'rtraind.sbatch: one srun line')
    if srun:
        words = shlex.split(srun[0])
        dargs = words[next(i for i, a in enumerate(words) if a.endswith('/rtraind')) + 1:]
        flags_known(dargs, 'rtraind.sbatch rtraind args')
        daemon_accepts(rtraind, dargs, 'rtraind.sbatch rtraind args')
    print(f'{len(known)} daemon flags known; {len(fails)} failure(s)')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
