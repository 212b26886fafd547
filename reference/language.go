package reference

import (
	"github.com/zclconf/go-cty/cty"

	"github.com/homelab-migrate/migrate/phases"
)

// A block of the runbook language, as the loader (package runbooks)
// accepts it.
type block struct {
	header, description string
	attrs               map[string]phases.Attribute
	// types replaces the type column where it is not a value's type.
	types map[string]string
	// nested blocks, in the order shown.
	nested []block
}

// attr is an optional attribute with a description.
func attr(ty cty.Type, doc string) phases.Attribute {
	return phases.Attribute{Type: ty, Description: doc}
}

func required(ty cty.Type, doc string) phases.Attribute {
	return phases.Attribute{Type: ty, Required: true, Description: doc}
}

var references = cty.List(cty.DynamicPseudoType)

// language is the runbook language outside the step types, in the order
// a runbook usually declares it.
var language = []block{
	{
		header:      `variable "NAME"`,
		description: "An input of the runbook. Its value comes from, in rising precedence: default, `MIGRATE_VAR_NAME`, the `*.auto.hcl` and `*.auto.hcl.age` files beside the runbook, `--var-file FILE`, `--var NAME=VALUE`. A value read from an age-encrypted file is sensitive.",
		attrs: map[string]phases.Attribute{
			"type":        attr(cty.DynamicPseudoType, "A type constraint (string, number, bool, list(string), map(string), object({...}), any); default any."),
			"default":     attr(cty.DynamicPseudoType, "The value when none is given; without it the variable must be set (validate, graph and status leave it unknown)."),
			"description": attr(cty.String, "What the variable is for."),
			"sensitive":   attr(cty.Bool, "Redact the value, and every value computed from it, in plans, logs, state and the terminal; default false."),
		},
		types: map[string]string{"type": "type expression"},
		nested: []block{{
			header:      "validation",
			description: "A rule the value must follow (repeatable).",
			attrs: map[string]phases.Attribute{
				"condition":     required(cty.Bool, "An expression over the variable that must be true."),
				"error_message": required(cty.String, "The error shown when it is false."),
			},
		}},
	},
	{
		header:      "locals",
		description: "Named expressions, `NAME = EXPRESSION`, referred to as local.NAME. They may use variables, other locals and functions, not step outputs.",
	},
	{
		header:      `backend "etcd"`,
		description: "Where the state and its lock live; at most one block. Without it (or with `backend \"local\" {}`) they are files in `.migrate/` beside the runbook (`--state` moves them). With etcd, a team or CI runners share one state: the lock is an etcd lease held while a command runs, so a holder that dies loses it after `lock_ttl`. Its values may use variables and locals, not step outputs. `--backend URL` or `MIGRATE_BACKEND` overrides the block, and `MIGRATE_ETCD_PASSWORD` gives the password.",
		attrs: map[string]phases.Attribute{
			"endpoints": required(cty.List(cty.String), "The members' client addresses, as [\"127.0.0.1:2379\", ...]; https:// with ca."),
			"prefix":    required(cty.String, "The key prefix the state lives under, such as \"migrate/homelab/\"; one per runbook."),
			"ca":        attr(cty.String, "The CA certificate (PEM file) that verifies the members: TLS on. Relative paths are from the runbook directory."),
			"cert":      attr(cty.String, "A client certificate (PEM file), with key."),
			"key":       attr(cty.String, "The client certificate's private key (PEM file), with cert."),
			"username":  attr(cty.String, "The etcd user, with password."),
			"password":  {Type: cty.String, Sensitive: true, Description: "The etcd user's password; better a sensitive variable or MIGRATE_ETCD_PASSWORD than text in the runbook. Never shown, logged or stored."},
			"lock_ttl":  attr(cty.String, "How long the lock outlives a holder that died (its lease), a duration of at least \"2s\"; default \"30s\"."),
			"insecure":  attr(cty.Bool, "Allow a password over plaintext gRPC (a test cluster on a trusted network): without it, a password without TLS (ca, or https:// endpoints) is refused. Every plan then warns that the password and the state cross the network in clear."),
		},
	},
	{
		header:      `provider "TYPE" "NAME"`,
		description: "Configures a provider, referred to as TYPE.NAME. Its attributes are the provider's (below, under each provider); they may use step outputs, which makes every step of that provider wait for those steps. Optional when the provider has no required attributes (as local). A step takes the only block of its provider without saying so; a second block of the type (two Talos nodes) makes each of its steps say which, with provider = TYPE.NAME.",
	},
	{
		header:      `phase "NAME"`,
		description: "A unit that is planned, run and rolled back together; it holds step, check and group blocks.",
		attrs: map[string]phases.Attribute{
			"description": attr(cty.String, "What the phase does."),
			"after":       attr(references, "The phases it runs after, as [phase.NAME, ...]; default the phase declared before it."),
		},
		types: map[string]string{"after": "list of references"},
	},
	{
		header:      `step "TYPE" "NAME"`,
		description: "One step of a phase, addressed TYPE.NAME (unique in the runbook). Its attributes are its step type's (below) plus the meta-arguments. A reference to another step's output (TYPE.NAME.OUTPUT) is also a dependency. With for_each, one instance per key, addressed TYPE.NAME[\"KEY\"] in the plan, the state, --json and the graph: refer to one instance's output as TYPE.NAME[\"KEY\"].OUTPUT, or to TYPE.NAME as the map of its instances by key (TYPE.NAME[each.key].OUTPUT). A step deleted from the runbook (its block, or its group call), or renamed without a moved block, is planned for revert (reason step_removed) once it has a record with revert data, and its phase's next run undoes it with the provider its record names, as Terraform destroys a resource deleted from its configuration; a record that names no provider configured now is left, with a warning.",
	},
	{
		header:      `group "NAME"`,
		description: "Calls a group, a directory of HCL reused as one unit (Terraform's `module` is the model): its `variable` blocks are its inputs, set by the call's other attributes; its `locals`; its `output \"NAME\" { value = ... }` blocks, what the runbook may use, as group.NAME.OUTPUT (group.NAME[\"KEY\"].OUTPUT with for_each, or group.NAME[each.key].OUTPUT); and its `step` and `check` blocks, written at the top level of its files, which join the calling phase addressed group.NAME.TYPE.STEP (group.NAME[\"KEY\"].TYPE.STEP with for_each) in the plan, the state, --json, moved blocks and the graph, where they are drawn in a frame of their own. Inside a group, var, local and TYPE.NAME are the group's own: what it needs from the runbook (a step's output too) the call passes as an input, and its steps wait for the steps an input uses. A group holds no phase, provider, backend, role, moved or group block. Its steps take the runbook's providers: the only block of their type, or the one the call's providers argument names. A step whose object is named after the step unless name says otherwise (incus_instance, incus_volume, helm_release, kubernetes_namespace) must set name in a group (from an input), or every call would manage the same object. A mistake in a group's file is reported once, at its line in the file; a mistake in an argument, at the call.",
		attrs: map[string]phases.Attribute{
			"source":     required(cty.String, "The group's directory, inside the runbook's and written from it, starting with ./ (\"./groups/app\"): its *.hcl files."),
			"for_each":   attr(cty.DynamicPseudoType, "A map, or a set of strings: one instance of the group per key, each.key and each.value in the call's arguments. Known at plan, as a step's for_each. An instance whose key leaves the map has all its steps planned for revert."),
			"depends_on": attr(references, "What every step of the group waits for, as [TYPE.NAME, group.OTHER, ...]. Elsewhere, depends_on = [group.NAME] waits for all the steps of the call, group.NAME[\"KEY\"] for one instance's, group.NAME.TYPE.STEP for one."),
			"providers":  attr(cty.DynamicPseudoType, "The provider blocks that run the group's steps, by provider type, as { talos = talos.rehearsal }: a group called for two Talos nodes runs each call's steps on its node."),
		},
		types: map[string]string{"for_each": "map or set of strings", "depends_on": "list of references", "providers": "map of references"},
	},
	{
		header:      `check "TYPE" "NAME"`,
		description: "A step type that can be a check (see \"usable as\" below), run before the phase's steps or after them. Its attributes are its type's plus the meta-arguments, when among them. A check only reads: the first Ctrl-C ends it at once, not done, and the next run checks again.",
	},
	{
		header:      "meta-arguments",
		description: "An attribute of the step type with the same name wins (http_check's own timeout is not the step's).",
		attrs: map[string]phases.Attribute{
			"provider":   attr(cty.DynamicPseudoType, "The provider block that runs the step, as TYPE.NAME. Without it: the only block of the step type's provider, or the one named \"default\", or, with no block, an implicit one when the provider needs no settings (local). Two blocks or more, none named \"default\", make a step without it an error at the step, naming the blocks: say which, as provider = talos.rehearsal."),
			"depends_on": attr(references, "Steps and checks to wait for, as [TYPE.NAME, ...]; in the same phase or one that runs before. TYPE.NAME of a step with for_each waits for all its instances, TYPE.NAME[\"KEY\"] for one."),
			"for_each":   attr(cty.DynamicPseudoType, "A map, or a set of strings (toset([...])): one instance of the step per key, in which each.key is the key and each.value its value (the key again for a set). It must be known at plan: made of variables, locals and literals, never of step outputs. No key may be empty. A step whose object is named after the step unless name says otherwise (incus_instance, incus_volume, helm_release, kubernetes_namespace) must set name from the instance, e.g. name = each.key. An instance whose key leaves the map is planned for revert (reason key_removed) and the next run undoes it with its revert data, as Terraform destroys it."),
			"discards":   attr(references, "Steps only: the steps whose effects this one destroys with its own (what was made inside the VM it deletes), as [TYPE.NAME, ...]; steps it depends on, or of an earlier phase. Once it is done, a rollback has nothing to undo for them: it marks them reverted without asking their provider, whose host may be gone."),
			"timeout":    attr(cty.String, "The longest the step may take, a duration such as \"30s\" or \"5m\"."),
			"when":       attr(cty.String, "Checks only: \"before\" (the phase does not start until it passes) or \"after\" (the phase is not complete until it passes); default \"after\". An after check whose depends_on names steps of its phase runs as soon as those are done, beside the phase's other steps; otherwise after all of them."),
		},
		types: map[string]string{"provider": "reference", "depends_on": "list of references", "discards": "list of references", "for_each": "map or set of strings"},
		nested: []block{{
			header:      "retry",
			description: "Try the step again when it fails.",
			attrs: map[string]phases.Attribute{
				"attempts": attr(cty.Number, "Tries in all, 1 to 1000; default 1."),
				"backoff":  attr(cty.String, "The wait before the second try, doubled after each; default \"1s\"."),
			},
		}},
	},
	{
		header:      `role "NAME"`,
		description: "Says what parts of the runbook stand for, for programs that read it (migrate init reads examples/homelab's roles: the old VMs, their stop steps, the disks, the images...); it changes nothing a plan or a run does. Each attribute is a part, PART = REF or PART = [REF, ...], where REF is a step or check (TYPE.NAME; group.CALL.TYPE.NAME or group.CALL[\"KEY\"].TYPE.NAME for a step of a group call), a variable (var.NAME) or a phase (phase.NAME), without quotes; the part names are the reader's. Each reference must be declared: renaming a step, variable or phase without its role is an error at the role's line.",
	},
	{
		header:      `service "NAME"`,
		description: "Names a service's window of downtime: from the start of the first of its old instance's stop steps to the first pass, after that, of the check that says its new instance serves. The engine records both ends in the steps' facts (`down_since` on a stop step: when its first attempt began since it was last new or reverted; `serving_since` on the check: when it first passed since it last failed or was reverted), so a run killed during the cutover and resumed measures the whole window; `migrate status` lists each service's downtime and `migrate report` shades it on the timeline. A step stops one service at most.",
		attrs: map[string]phases.Attribute{
			"stop":         required(references, "The steps that stop the old instance, as TYPE.NAME (group.CALL.TYPE.NAME in a group), one or a list: steps, not checks."),
			"serving":      required(cty.DynamicPseudoType, "The check that passes once the new instance serves, as TYPE.NAME (group.CALL.TYPE.NAME): an after-check of the phase of the first stop step or of a later one."),
			"max_downtime": attr(cty.String, "The longest window the runbook accepts, a duration such as \"30m\"."),
		},
		types: map[string]string{"stop": "reference or list of references", "serving": "reference"},
	},
	{
		header:      "moved",
		description: "Renames a step without losing its record (Terraform's `moved` is the model): the record of the step at `from` is carried to the step at `to`, so the renamed step is not run again. The plan shows `# FROM moved to TO` and decides the step from the record it carries (a done step with the same inputs stays done); `run` and `rollback` move the record in the state first, under the lock, before any step. A `from` without a record does nothing (keep the block for those who never ran the old name); a `to` that already has a record of its own is refused at plan. `from` must no longer be declared; `to` must be, or be the `from` of a later block (renamed twice: `a` to `b`, then `b` to `c`, in that order). An address is moved from once, and moves never come back to where they started.",
		attrs: map[string]phases.Attribute{
			"from": required(cty.DynamicPseudoType, "The step's old address, TYPE.NAME (group.CALL.TYPE.NAME in a group, TYPE.NAME[\"KEY\"] for an instance), without quotes."),
			"to":   required(cty.DynamicPseudoType, "The step's new address, as from: into or out of a group or a for_each key too."),
		},
		types: map[string]string{"from": "reference", "to": "reference"},
	},
	{
		header:      "removed",
		description: "Says what becomes of the records of a step deleted from the runbook (Terraform's `removed` is the model). Without a block, a deleted step whose record says how to undo it is planned for revert (step_removed) and undone by its phase's next run. With `revert = false`, its record is let go instead: what the step did stays as it is, and no run or rollback undoes it; the plan shows `# ADDRESS let go (removed block at FILE:LINE)`, and `run` and `rollback` write it into the record first, under the lock (its revert data dropped, the fact `let_go_by` added), before any step. `revert = true` says in the runbook what deleting the step does anyway. `from` must no longer be declared, nor be the `from` of a moved block; a `from` without a record does nothing.",
		attrs: map[string]phases.Attribute{
			"from":   required(cty.DynamicPseudoType, "The deleted step's address, TYPE.NAME (group.CALL.TYPE.NAME in a group; every instance of a for_each step, or TYPE.NAME[\"KEY\"] for one), or a deleted group call's, group.NAME (group.NAME[\"KEY\"] for one instance): all its steps. Without quotes."),
			"revert": required(cty.Bool, "false lets the records go, leaving what their steps did; true undoes them. Written as it is, true or false."),
		},
		types: map[string]string{"from": "reference"},
	},
}
