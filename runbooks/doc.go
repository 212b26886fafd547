// Package runbooks loads a runbook, a directory of *.hcl files read through
// an fs.FS, into a *phases.Runbook, and reports every mistake it finds as a
// phases.Diagnostic with the file, the range and (through the files returned
// by Loader.Files) a source snippet. It is where HCL's diagnostics end:
// Diagnostics converts them, keeping the values an expression had. It does not run anything: package
// engine walks the result, providers do the work, and cmd/migrate renders
// the diagnostics.
//
// # The language
//
//	variable "node_ip" {
//	  type        = string
//	  default     = "10.0.0.50"
//	  description = "Where the new node listens."
//	  sensitive   = false
//	  validation {
//	    condition     = can(regex("^10\\.", var.node_ip))
//	    error_message = "The node must be on the 10.0.0.0/8 network."
//	  }
//	}
//
//	locals {
//	  url = "http://${var.node_ip}:8096"
//	}
//
//	provider "talos" "node" { version = "v1.13.3" }
//
//	phase "platform" {
//	  description = "Bring up the cluster."
//	  step "talos_kubeconfig" "main" {
//	    provider = talos.node
//	    timeout  = "5m"
//	    retry {
//	      attempts = 3    # tries in all; default 1
//	      backoff  = "2s" # doubled after each try; default 1s
//	    }
//	  }
//	}
//
//	phase "apps" {
//	  after = [phase.platform]   # default: the phase declared before
//	  check "http_check" "up" {
//	    url  = local.url
//	    when = "before" # default "after"
//	  }
//	  step "exec" "apply" {
//	    command    = ["kubectl", "--kubeconfig", talos_kubeconfig.main.path, "apply", "-f", "."]
//	    depends_on = [http_check.up]
//	  }
//	}
//
// Variables take their value from, in increasing precedence: the default,
// MIGRATE_VAR_NAME in Options.Environ, the *.auto.hcl and *.auto.hcl.age
// files beside the runbook by name, the --var-file files in order, and
// the --var options in order. An age-encrypted variables file is decrypted
// in memory (Options.Identities); its values are sensitive, and its
// diagnostics name it without quoting it. Values given as strings (environment, --var)
// are taken literally for primitive types and for variables without a type,
// and parsed as HCL expressions for collections and objects. A variable
// with sensitive = true (or set from an encrypted file) carries phases.SensitiveMark, and so does every
// value computed from it.
//
// Locals may use variables, other locals and functions, but not step
// outputs: like variables, they are known before any step runs. A
// provider block may use step outputs (endpoints =
// [incus_instance.talos.ipv4]): the steps it refers to are recorded in
// ProviderConfig.DependsOn and added to Step.DependsOn of every step and
// check the provider runs, so they must run in the same phase or one
// strictly before; the engine configures the provider when first needed.
//
// A backend "etcd" block (at most one; the local files without it) says
// where the state lives: Runbook.Backend. Like locals it may use variables,
// not step outputs; its password may be sensitive, the other values may
// not (they are shown in messages), and it joins Runbook.Secrets.
//
// Names (labels, arguments, references) are normalized to Unicode NFC as
// the files are parsed, and a block name whose letters come from two
// scripts is refused: names that look alike are one name or an error.
// A file that is not UTF-8 text is one error, and at most 20 problems
// are reported per file, then a count of the rest. An error in an
// expression over a sensitive value is reported without its detail, which
// could quote the value.
//
// Steps and checks are addressed as TYPE.NAME, unique across the runbook.
// A step refers to another's outputs as TYPE.NAME.OUTPUT; every such
// reference, and every depends_on entry (TYPE.NAME, or step.TYPE.NAME as in
// the design notes), is an edge in Step.DependsOn. A
// dependency must be in the same phase or in one that runs strictly before
// (following after, transitively). Inside a phase, a "before" check may only
// depend on "before" checks, and a step may not depend on an "after" check.
//
// The meta-arguments of steps and checks are provider, depends_on, timeout,
// retry {} and (checks only) when. An attribute of the step type with the
// same name as a meta-argument shadows it: http_check's timeout is the
// provider's, not the step's. Everything else in the block is checked
// against the step type's schema at load time and decoded again by the
// step's phases.Evaluator with the outputs known at that moment; outputs not
// known yet are unknown values, so a plan can be made before anything ran.
//
// A step without provider = TYPE.NAME is run by the only provider block of
// its provider type, or the one named "default" among several, or, when
// there is no block and the provider has no required attributes, by an
// implicit configuration named "default" (so local steps need no block).
//
// # Groups
//
// A phase calls a group, a directory of HCL (groups.go), as Terraform
// calls a module: group "app" { source = "./groups/app" for_each = ...
// providers = { talos = talos.node } INPUT = ... }. The loader reads the
// directory once and parses it again for each instance (the meta-
// arguments are trimmed from a step's syntax as it is declared), with
// the loadContext swapped: inside, var, local and TYPE.NAME are the
// instance's, and its steps are addressed group.CALL.TYPE.NAME
// (phases.Address.Group). An argument computed from step outputs is
// unknown at load and evaluated again with the outputs of each
// evaluation (groupInst.values); the group's steps depend on the steps it
// uses. The runbook reads outputs as group.CALL.OUTPUT, an evaluation
// context variable computed the same way. Diagnostics in a group's file
// come from its first instance, and repeated ones are dropped.
//
// # Symbolic links
//
// Every load walks the runbook's tree through the fs.FS (links.go; hidden
// entries left out) and reports, naming the link, where it leads and what
// to do: a link cycle (a link back into a directory that holds it, or
// links that lead to one another), on which whatever follows links never
// ends; and a link out of the runbook directory, to files that are not
// part of the runbook.
//
// # Functions
//
// The cty standard library under Terraform's names (upper, join, format,
// merge, jsonencode, regex, tolist, try, can, ...), yamlencode and
// yamldecode, sha256 and friends, base64encode and base64decode,
// sensitive and nonsensitive, and: file(path) and templatefile(path, vars),
// which read paths relative to the runbook directory (through the fs.FS
// when inside it); fileexists(path); abspath(path), relative to
// Options.Dir; basename and dirname; env(name), which reads
// Options.Environ; and not_older(image, version), the image unless its
// tag is a version older than version (what the old VM runs, as migrate
// init read it): the load, and so the plan, fails at the call naming
// both, unless MIGRATE_ALLOW_DOWNGRADE (in Options.Environ) names the
// image's repository (notolder.go).
package runbooks
