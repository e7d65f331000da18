package protocol

// RequestLimits bound what one inference request may declare. Both decoders
// (the HTTP/JSON one and the gRPC sink that both gRPC servers share) count
// as they parse and stop at the first count over a bound, so a request costs
// memory in proportion to its own bytes, never to what it claims. A zero
// field takes the Default* constant beside it.
type RequestLimits struct {
	// MaxInputs and MaxOutputs bound a request's tensors; DefaultMaxTensors.
	MaxInputs, MaxOutputs int
	// MaxParameters bounds the parameters of a request and of each of its
	// tensors, counted separately; DefaultMaxParameters.
	MaxParameters int
	// MaxIDBytes bounds a request's id; DefaultMaxIDBytes.
	MaxIDBytes int
	// MaxStringBytes bounds every other string: names, datatypes, parameter
	// keys and string values; DefaultMaxStringBytes.
	MaxStringBytes int
	// MaxDepth bounds the nesting of JSON arrays and objects; DefaultMaxDepth.
	MaxDepth int
	// MaxShapeDims bounds the dimensions of a tensor's shape;
	// DefaultMaxShapeDims.
	MaxShapeDims int
}

// The defaults of RequestLimits. The model has one input and one output, so
// a request with more tensors than this is refused without being read
// further; the bounds leave room for clients that name outputs or send
// Triton's usual parameters.
const (
	DefaultMaxTensors     = 16
	DefaultMaxParameters  = 64
	DefaultMaxIDBytes     = 256
	DefaultMaxStringBytes = 1024
	DefaultMaxDepth       = 8
	DefaultMaxShapeDims   = 8
)

// withDefaults returns l with each zero field set to its default.
func (l RequestLimits) withDefaults() RequestLimits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxInputs, DefaultMaxTensors)
	def(&l.MaxOutputs, DefaultMaxTensors)
	def(&l.MaxParameters, DefaultMaxParameters)
	def(&l.MaxIDBytes, DefaultMaxIDBytes)
	def(&l.MaxStringBytes, DefaultMaxStringBytes)
	def(&l.MaxDepth, DefaultMaxDepth)
	def(&l.MaxShapeDims, DefaultMaxShapeDims)
	return l
}

// overLimit is the error of a request past one of RequestLimits: 413 /
// ResourceExhausted, naming what was counted and its bound.
func overLimit(what string, bound int) *Error {
	return tooLarge("request has more than %d %s", bound, what)
}
