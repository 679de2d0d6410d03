package workload

import "slices"

// Placement is what a pod spec says of the nodes it may run on: its
// nodeName, its nodeSelector and its required node affinity.
type Placement struct {
	NodeName     string
	NodeSelector map[string]string
	// Terms are the node selector terms of the required node affinity (any
	// one may match); none: no such affinity.
	Terms []Term
}

// Term is a node selector term: every expression must hold.
type Term struct {
	Exprs []Expr
	// Fields says the term has matchFields, which are not judged.
	Fields bool
}

// Expr is a node selector requirement: In, NotIn, Exists, DoesNotExist
// (Gt, Lt and any other operator are not judged).
type Expr struct {
	Key, Operator string
	Values        []string
}

// MayRunOn says whether a pod placed by p could be scheduled on the node
// named node with labels. What it cannot judge (labels unknown, Gt and Lt,
// matchFields, an operator it does not know) counts as a match. Taints are
// not judged. A nil p runs anywhere.
func (p *Placement) MayRunOn(node string, labels map[string]string) bool {
	if p == nil {
		return true
	}
	if p.NodeName != "" {
		return p.NodeName == node
	}
	if labels == nil {
		return true
	}
	for k, v := range p.NodeSelector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	if len(p.Terms) == 0 {
		return true
	}
	return slices.ContainsFunc(p.Terms, func(t Term) bool { return t.mayMatch(labels) })
}

// mayMatch: every expression of the term may hold. An empty term matches
// no node, as the scheduler has it.
func (t Term) mayMatch(labels map[string]string) bool {
	if len(t.Exprs) == 0 && !t.Fields {
		return false
	}
	for _, e := range t.Exprs {
		v, has := labels[e.Key]
		switch e.Operator {
		case "In":
			if !has || !slices.Contains(e.Values, v) {
				return false
			}
		case "NotIn":
			if has && slices.Contains(e.Values, v) {
				return false
			}
		case "Exists":
			if !has {
				return false
			}
		case "DoesNotExist":
			if has {
				return false
			}
		}
	}
	return true
}

// placementOf reads a pod spec's placement from a manifest; nil when it
// has none.
func placementOf(spec map[string]any) *Placement {
	var p Placement
	p.NodeName, _ = spec["nodeName"].(string)
	if sel, ok := spec["nodeSelector"].(map[string]any); ok {
		p.NodeSelector = map[string]string{}
		for k, v := range sel {
			s, _ := v.(string)
			p.NodeSelector[k] = s
		}
	}
	if req, ok := dig(spec, []string{"affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"}); ok {
		terms, _ := req["nodeSelectorTerms"].([]any)
		for _, t := range terms {
			tm, _ := t.(map[string]any)
			var term Term
			fields, _ := tm["matchFields"].([]any)
			term.Fields = len(fields) > 0
			exprs, _ := tm["matchExpressions"].([]any)
			for _, e := range exprs {
				em, _ := e.(map[string]any)
				var x Expr
				x.Key, _ = em["key"].(string)
				x.Operator, _ = em["operator"].(string)
				vals, _ := em["values"].([]any)
				for _, v := range vals {
					if s, ok := v.(string); ok {
						x.Values = append(x.Values, s)
					}
				}
				term.Exprs = append(term.Exprs, x)
			}
			p.Terms = append(p.Terms, term)
		}
	}
	if p.NodeName == "" && p.NodeSelector == nil && p.Terms == nil {
		return nil
	}
	return &p
}
