#!/usr/bin/env python3
"""Writes state.json: a state in format 2 as migrate 6338491 (the last
release of format 2) writes it, with a record for each step type of every
provider (local, incus, talos, helm/kubernetes: docs/reference.md, made from
their schemas), every field of each type's revert data filled (the revert
types of providers/*/ at 6338491), and every field of a record used by at
least one. The checksum is format 2's: the SHA-256 of the file without its
checksum line, records as Go's encoding/json writes them (struct order,
compact). Run from this directory: python3 make.py. `migrate status` of
6338491 reads the result (checked when it was made)."""
import hashlib, json

snap = {"node": "cp1", "file": "etcd-snapshots/cp1-20260301T100000Z.snapshot.age", "sha256": "ab" * 32,
        "size": 1048576, "taken": "2026-03-01T10:00:00Z", "before": "talos_upgrade.cp"}
reverts = {
    # local
    "approval": None,
    "exec": {"description": "run: ./restore.sh --from backup", "data": {
        "argv": ["./restore.sh", "--from", "backup"], "env": {"PGHOST": "db"}, "dir": "scripts",
        "secret_argv": [2], "secret_env": ["PGPASSWORD"], "secret_dir": True,
        "creates": "restored.flag", "secret_creates": True}},
    "http_check": {"description": "nothing to undo"},
    "smb_check": {"description": "nothing to undo"},
    "wait": {"description": "nothing to undo"},
    # incus
    "incus_device": {"description": "restore device gpu of web", "data": {
        "op": "restore", "instance": "web", "uuid": "0b6f7c2e-3f41-4c1e-9d55-1c1c7a0f5e21", "name": "gpu",
        "previous": {"type": "gpu", "pci": "0000:00:02.0"}}},
    "incus_exec": {"description": "run in web: systemctl stop app", "data": {
        "instance": "web", "argv": ["systemctl", "stop", "app"], "secret_argv": [1], "user": 1000,
        "group": 1000, "cwd": "/srv", "operation": "/1.0/operations/7d0f"}},
    "incus_file": {"description": "restore the files pushed to web", "data": {
        "push": True, "instance": "web", "root": "/etc/app", "created": ["/etc/app/new.conf"],
        "replaced": ["/etc/app/app.conf"], "kept": {"/etc/app/app.conf": "files/web-app.conf.age"}}},
    "incus_sync": {"description": "remove the copy /srv/copy and its manifest in instance web", "data": {
        "instance": "web", "destination": "/srv/copy", "final": True, "created": True, "remove": True,
        "operation": "9a3c1f2e-1111-2222-3333-444455556666"}},
    "incus_instance": {"description": "restore instance web", "data": {
        "op": "restore", "instance": "web", "config": {"limits.cpu": "2", "user.note": None},
        "devices": {"root": {"type": "disk", "path": "/", "pool": "default"}},
        "profiles": ["default", "web"], "set_profiles": True, "not_kept": ["volatile.eth0.hwaddr"]}},
    "incus_instance_state": {"description": "start web again", "data": {
        "op": "start", "instance": "web", "snapshot": "before-stop", "restore": True, "keep": True,
        "autostart": "true", "timeout": 120, "force": True, "marks": {"user.migrate.stopped": "1"}}},
    "incus_snapshot": {"description": "delete snapshot web/pre", "data": {
        "op": "delete", "instance": "web", "snapshot": "pre"}},
    "incus_volume": {"description": "restore volume data", "data": {
        "op": "restore", "pool": "default", "name": "data", "config": {"size": "10GiB", "user.x": None},
        "not_kept": ["volatile.idmap.last"]}},
    # talos
    "talos_bootstrap": {"description": "nothing to undo"},
    "talos_image": {"description": "nothing to undo: the ISO /var/lib/isos/talos.iso stays"},
    "talos_kubeconfig": {"description": "remove the kubeconfig file kubeconfig"},
    "talos_machine_config": {"description": "re-apply the previous config of cp1", "data": {
        "recipient": "age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gq",
        "nodes": {"cp1": {"sha256": "cd" * 32, "config_age": "YWdlLWVuY3J5cHRpb24ub3JnL3YxCi0+IFgyNTUxOQ=="}},
        "etcd_snapshots": {"cp1": snap}}},
    "talos_read": {"description": "nothing to undo"},
    "talos_service_health": {"description": "nothing to undo"},
    "talos_upgrade": {"description": "upgrade back to v1.13.3 (installer factory/installer/abc:v1.13.3)", "data": {
        "version": "v1.13.3", "schematic": "ef" * 32, "extensions": ["siderolabs/i915"],
        "installer": "factory.example/installer/" + "ef" * 32 + ":v1.13.3",
        "etcd_snapshots": {"cp1": snap}}},
    # helm / kubernetes
    "helm_release": {"description": "roll back release web to revision 3", "data": {
        "name": "web", "namespace": "apps", "uninstall": True, "version": 3}},
    "kubernetes_job": {"description": "delete job migrate-db", "data": {"name": "migrate-db", "namespace": "apps"}},
    "kubernetes_manifest": {"description": "restore 2 objects", "data": {"objects": [
        {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "cfg", "delete": True},
        {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "apps", "name": "web",
         "prior": {"spec": {"replicas": 2}}}]}},
    "kubernetes_namespace": {"description": "delete namespace apps", "data": {
        "name": "apps", "delete": True, "labels": {"team": "home", "gone": None}, "annotations": {"note": "x", "old": None}}},
    "kubernetes_ready": {"description": "nothing to undo: a check"},
    "kubernetes_secret": {"description": "restore secret apps/db", "data": {
        "name": "db", "namespace": "apps", "delete": True, "restore": True}},
}
checks = {"http_check", "smb_check", "kubernetes_ready", "talos_service_health"}
statuses = ["done", "done", "failed", "running", "reverting", "revert_failed", "done"]

steps = {}
for i, (typ, inv) in enumerate(sorted(reverts.items())):
    addr = typ + ".one"
    rec = {"address": addr, "phase": "p%d" % (i % 3)}
    if typ in checks:
        rec["check"] = True
    st = statuses[i % len(statuses)]
    rec["status"] = st
    rec["input_hash"] = "hmac-sha256-v2:k1:%064x" % i
    rec["outputs"] = {"value": {"n": i, "name": typ}, "type": ["object", {"n": "number", "name": "string"}]}
    if i % 2 == 0:
        rec["private"] = "cHJpdmF0ZQ=="
    if inv is not None:
        rec["inverse"] = inv
    rec["identity"] = "uuid-%d" % i
    if i > 0:
        rec["upstream"] = {"exec.one": "uuid-%d" % sorted(reverts).index("exec")}
    if typ == "approval":
        rec["record"] = {"approved_at": "2026-03-01T11:00:00Z", "approved_by": "alice@laptop"}
    rec["attempts"] = 1 + i % 3
    rec["started_at"] = "2026-03-01T10:%02d:00Z" % i
    if st not in ("running", "reverting"):
        rec["finished_at"] = "2026-03-01T10:%02d:05.123456789Z" % i
    if st in ("failed", "revert_failed"):
        rec["last_error"] = "exit status 1"
    if st in ("running", "reverting"):
        rec["holder"] = {"lock_id": "lock-%d" % i, "pid": 4242, "host": "laptop", "user": "alice", "lease": 7587}
    steps[addr] = rec

def dumps(v):
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)

def body(version):
    out = '{\n  "version": %d,\n  "serial": 77,\n  "lineage": "f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0",\n  "migrate_version": "6338491",\n  "steps": {' % version
    out += ",".join("\n    %s: %s" % (dumps(k), dumps(steps[k])) for k in sorted(steps))
    return out + "\n  }\n}\n"

b = body(2)
head = '{\n  "version": 2,\n'
out = head + '  "checksum": "sha256:%s",\n' % hashlib.sha256(b.encode()).hexdigest() + b[len(head):]
open("state.json", "w").write(out)
