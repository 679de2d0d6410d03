package report

// State is where an image stands on a node, as holdfast check, the agent's
// report and the NodeImages objects say it.
type State string

const (
	Pinned   State = "pinned"   // a record of that name, pinned: the kubelet's GC keeps it
	Present  State = "present"  // a record of that name, not pinned: the kubelet's GC may delete it
	Missing  State = "missing"  // no record of that name: the kubelet would pull it
	Mismatch State = "mismatch" // a digest reference whose repository the node holds at other digests only
)
