// Package sandbox runs commands in a directory tree as in a container,
// without root and without images: in new user, mount and PID namespaces
// (Namespaces), chrooted into a root directory where Mount bound the
// host's /usr, /bin, /sbin and /lib* read-only (where the root lacks
// them), /dev's harmless nodes, /proc and a list of binds (host path ->
// path inside, read-only or not).
//
// lab/incushost's instances use Mount and Namespaces for their init;
// Command runs one command and is done (lab/kubecp runs the containers of
// Job pods so): it starts the running program again (/proc/self/exe)
// with the spec in its environment, and this package's init function,
// seeing it, mounts, chroots, changes directory, drops CAP_SYS_ADMIN and
// CAP_SYS_CHROOT from the bounding set (so the command cannot remount the
// host's directories writable nor leave the root) and execs the command,
// which thus is PID 1 of its namespace: killing it ends everything it
// started. Any program that imports this package, directly or not, can
// be the runner.
//
// Limits: the command is root in its user namespace; as root on the host
// that is uids 0-65535, the same as the host's (chown works); as another
// user only that user is mapped (as uid 0), so chown to another uid
// fails. There is no network, cgroup or seccomp isolation, and the
// host's /usr is the command's: no image is pulled or unpacked.
package sandbox
