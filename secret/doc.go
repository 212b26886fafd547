// Package secret keeps secrets out of text. A Scrubber learns secret
// strings — the plain values of sensitive variables, the values a step's
// configuration marks sensitive, the keys a provider loads — and replaces
// them wherever they turn up in free text: command output, error messages,
// plan diffs. The engine and every provider use it, so that a secret
// interpolated into a longer string ("echo ${var.token}") is caught too,
// and so is a secret in the forms it takes on the way out (forms.go:
// shell-quoted, JSON-escaped, base64, URL-encoded).
//
// A Writer scrubs a stream by whole lines, bounded: a line longer than
// MaxLine is cut where no secret straddles the cut. Visible makes the
// terminal controls in a text visible, for what commands and guests print.
//
// A secret of several words is learned word by word too (pieces: each
// word of MinPiece bytes or more), since a command may print one word of
// it. That is wrong for a document that is secret for a few values in it:
// a Talos machine config as user_data holds the cluster's keys, and the
// node's name, its endpoint and its paths, which are in every plan. Its
// provider lists the secrets inside it (the phases.SecretParts mark,
// beside the sensitive one: talos_machine_config lists what the Talos
// machinery and its own scrubber redact, and each key's PEM lines), and
// AddMarked learns such a document whole, in all its forms, and each
// part in all its forms and words: the keys are scrubbed in every
// encoding and alone on a line, the node's name is not. A mark made for
// another text (the document transformed, or inside a longer string) is
// ignored, and that text is learned word by word: what is not known to be
// a document's listed secrets is scrubbed as any secret.
//
// Marks on cty values (phases.SensitiveMark) say what is secret; this
// package only finds and replaces.
package secret
