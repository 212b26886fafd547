// Package agefile reads and writes the age-encrypted files that migrate
// keeps beside a runbook: secrets bundles, talosconfigs, variable and
// values files, pulled signing keys. One place knows how an encrypted
// file is recognised (binary or armored), where the identity comes from
// (a file, or MIGRATE_AGE_IDENTITY holding an identity or a path) and
// where the recipients are listed (.age-recipients beside the runbook),
// so that every provider and the CLI agree.
package agefile
