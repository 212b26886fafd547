// Package plugin runs a provider in a program of its own and speaks to it
// over the program's standard input and output, as Terraform and Packer do
// with theirs.
//
// Why: the Talos and Helm providers link Talos machinery, client-go and
// Helm — 100 MB of code whose package initialisation alone costs ~25 ms
// and ~80 MiB of resident pages in every process. Built into migrate, that
// weight is paid by every `migrate plan` and `migrate status`, even of a
// runbook that only runs shell commands. As plugins, it is paid only by a
// runbook that uses them, and only in their own processes.
//
// The host side is a providers.Factory (Factory) whose providers answer
// Schema from the schema compiled into migrate, and start the program at
// the first call that needs it (Configure). The program side is Serve.
//
// The protocol is one JSON object per line each way:
//
//	plugin -> host, first:  {"protocol":5,"provider":"talos","schema":"<sha256>"}
//	host -> plugin:         {"id":7,"method":"apply","params":{"Type":...}}
//	                        {"stop":7}                 call 7's Stop is closed
//	                        {"cancel":7}
//	                        {"intended":7}             call 7's intent is saved
//	                        {"intended":7,"intent_error":"..."}  or not, and why
//	plugin -> host:         {"log":7,"data":"..."}     output of call 7, in order
//	                        {"intent":7,"revert":{...}}  call 7's Apply called Intent
//	                        {"id":7,"result":{...}}    its answer, after its output
//
// Calls run concurrently; cancelling a call's context sends "cancel" and
// the call still waits for the provider's answer (which says it was
// interrupted), so nothing is left running behind the engine's back. An
// Apply's Stop channel crosses the same way: the request says it has one
// (true), and its closing sends "stop", which closes the program's copy;
// the provider's waits end and the answer says Stopped. An Apply's Intent
// crosses too: the request says it has one (true); the program's call of
// it sends the revert data on an intent line, which the host hands to the
// engine's Intent (saving it in the step's running record) on the calling
// goroutine, and waits for the answer, so that a run killed after the
// change it announces still has what rollback needs.
// Params and results are the requests and responses of package providers
// themselves, encoded by one codec (codec.go) that walks their fields by
// reflection: a field added to a request crosses with no change here, and
// a field of a kind it cannot carry fails the call (and
// TestEveryFieldCrosses) with its name. cty values cross as msgpack of
// the dynamic type, which keeps unknown values; the sensitive mark
// crosses as a list of paths and is put back on the other side, so
// redaction works exactly as in one process.
//
// The program dies with migrate: its parent-death signal is SIGKILL, and
// it exits when its standard input closes. It is put in its own process
// group and ignores SIGINT, so a Ctrl-C in the terminal reaches migrate
// only, which then stops the steps gently, through Stop and cancel.
//
// What a program writes on its standard error reaches migrate's, each
// line after the program's name, scrubbed of the secrets it was given
// (its secret-carrying variables, and the sensitive parts of every value
// the codec sent it or read from it), as are a panic's message and the
// last lines quoted when it dies.
//
// A program receives decrypted configuration and the age identity, so it
// is not taken on trust (find.go). It is looked for in $MIGRATE_PLUGIN_DIR,
// then beside the migrate executable, never in PATH; neither the file nor
// its directory may be writable by its group or by everyone; and its
// sha256, read from the open file, must be the one make build recorded in
// migrate (Program.Sum). That open file is what runs, through
// /proc/self/fd, so the path cannot be given another program between the
// check and the run. A migrate built without sums (go build) runs
// programs from $MIGRATE_PLUGIN_DIR only, unverified, and its plans say
// so. The schema digest of the handshake then makes a program from
// another build fail with a clear message instead of misreading requests;
// a one-shot command of a program (Run, ServeCommand: the talos program
// making a cluster's keys) goes through the same checks and handshake.
package plugin
