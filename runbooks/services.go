package runbooks

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"

	"github.com/homelab-migrate/migrate/phases"
)

// serviceBlock is service "NAME" { stop = STEP | [STEP, ...]
// serving = CHECK  max_downtime = "30m" }.
type serviceBlock struct {
	Name        string         `hcl:"name,label"`
	NameRange   hcl.Range      `hcl:"name,label_range"`
	Stop        hcl.Expression `hcl:"stop"`
	Serving     hcl.Expression `hcl:"serving"`
	MaxDowntime hcl.Expression `hcl:"max_downtime,optional"`
	DefRange    hcl.Range      `hcl:",def_range"`
}

// declareServices checks the service blocks: each name once and a name
// as steps are named; stop names steps (not checks), each of at most one
// service; serving names an after-check (a before-check gates its phase,
// it says nothing of what the phase made), in the phase of a stop step or
// a later one; max_downtime a positive duration.
func (ld *load) declareServices(blocks []*serviceBlock) []*phases.Service {
	var list []*phases.Service
	byName := map[string]*phases.Service{}
	stopOf := map[phases.Address]*phases.Service{}
	for _, b := range blocks {
		fail := func(subject hcl.Range, summary, detail string) {
			ld.diags = append(ld.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: subject.Ptr()})
		}
		if first, ok := byName[b.Name]; ok {
			fail(b.NameRange, "Duplicate Service", fmt.Sprintf("A service named %q is declared already, at %s. Each service is declared once.", b.Name, first.Range))
			continue
		}
		if !ld.validName("Service", "service", b.Name, b.NameRange, "") {
			continue
		}
		svc := &phases.Service{Name: b.Name, Range: toRange(b.DefRange)}
		byName[b.Name] = svc
		where := fmt.Sprintf("The stop of service %q", b.Name)
		ok := true
		exprs := []hcl.Expression{b.Stop}
		if list, diags := hcl.ExprList(b.Stop); !diags.HasErrors() {
			exprs = list
		}
		var first *stepDecl // the stop step of the earliest phase
		for _, e := range exprs {
			d, found := ld.namedStep("Service", where, e)
			if !found {
				ok = false
				continue
			}
			switch other := stopOf[d.addr()]; {
			case d.isCheck:
				fail(e.Range(), "Service Stop Is a Check", fmt.Sprintf("%s names %s, a check: name the steps that stop the old instance (a check changes nothing).", where, d.addr()))
				ok = false
			case other != nil && other != svc:
				fail(e.Range(), "Step Stops Two Services", fmt.Sprintf("%s stops service %q already (at %s): one step's start opens one window. Declare the two as one service, or stop each with a step of its own.", d.addr(), other.Name, other.Range))
				ok = false
			case slices.Contains(svc.Stop, d.addr()):
				fail(e.Range(), "Duplicate Service Stop", fmt.Sprintf("%s names %s twice.", where, d.addr()))
				ok = false
			default:
				stopOf[d.addr()] = svc
				svc.Stop = append(svc.Stop, d.addr())
				if first == nil || ld.runsBefore(d.phase, first.phase) {
					first = d
				}
			}
		}
		if len(exprs) == 0 {
			fail(b.Stop.Range(), "Service Without a Stop", fmt.Sprintf("Service %q names no stop step: its window opens when its old instance's stop begins.", b.Name))
			ok = false
		}
		where = fmt.Sprintf("The serving of service %q", b.Name)
		if d, found := ld.namedStep("Service", where, b.Serving); !found {
			ok = false
		} else {
			switch {
			case !d.isCheck || d.step.When != phases.CheckAfter:
				fail(b.Serving.Range(), "Service Serving Is Not an After-Check", fmt.Sprintf("%s names %s: name the check that passes once the new instance serves (a check of its phase, run after its steps; not before).", where, d.addr()))
				ok = false
			case first != nil && ld.runsBefore(d.phase, first.phase):
				fail(b.Serving.Range(), "Service Served Before It Stops", fmt.Sprintf("%s names %s, a check of phase %q, which runs before phase %q stops the old instance (%s): name a check of that phase or a later one.", where, d.addr(), d.phase.phase.Name, first.phase.phase.Name, first.addr()))
				ok = false
			default:
				svc.Serving = d.addr()
			}
		}
		if b.MaxDowntime != nil && !nullExpr(b.MaxDowntime) {
			if dur, valid := ld.duration(b.MaxDowntime, "max_downtime", false); valid {
				svc.MaxDowntime = dur
			} else {
				ok = false
			}
		}
		if ok {
			list = append(list, svc)
		}
	}
	return list
}

// nullExpr says whether e is null: an optional attribute gohcl found
// absent, or one written as null.
func nullExpr(e hcl.Expression) bool {
	v, diags := e.Value(nil)
	return !diags.HasErrors() && v.IsNull()
}
