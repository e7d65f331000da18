package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"text/template"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/inferbench/inferbench/inference"
	"github.com/inferbench/inferbench/inference/backend"
	"github.com/inferbench/inferbench/inference/protocol"
)

// The deployment files under deploy/ (Dockerfiles, KServe manifests) are
// checked here against the real command, so they cannot drift from it: every
// container argument goes through parseServe, ports are compared with the
// flags' addresses, probe and metrics paths are fetched from the real
// handlers, and the grace period is compared with -grace and -drain-delay.
// Manifests are decoded strictly: a misspelt field is an error, not a field
// silently ignored.

const deployDir = "../../deploy"

// k8sMeta is the part of metav1.ObjectMeta the manifests use.
type k8sMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type typeMeta struct {
	APIVersion string  `json:"apiVersion"`
	Kind       string  `json:"kind"`
	Metadata   k8sMeta `json:"metadata"`
}

// servingRuntime is the part of KServe's ClusterServingRuntime (API group
// serving.kserve.io/v1alpha1) the manifests use, with KServe's field names.
type servingRuntime struct {
	typeMeta `json:",inline"`
	Spec     struct {
		Annotations           map[string]string `json:"annotations"`
		SupportedModelFormats []struct {
			Name       string `json:"name"`
			Version    string `json:"version"`
			AutoSelect *bool  `json:"autoSelect"`
			Priority   *int   `json:"priority"`
		} `json:"supportedModelFormats"`
		ProtocolVersions []string    `json:"protocolVersions"`
		Containers       []container `json:"containers"`
		Volumes          []struct {
			Name     string    `json:"name"`
			EmptyDir *struct{} `json:"emptyDir"`
		} `json:"volumes"`
	} `json:"spec"`
}

// container is the part of core/v1 Container the manifests use.
type container struct {
	Name  string   `json:"name"`
	Image string   `json:"image"`
	Args  []string `json:"args"`
	Env   []struct {
		Name      string `json:"name"`
		Value     string `json:"value"`
		ValueFrom *struct {
			ResourceFieldRef struct {
				ContainerName string `json:"containerName"`
				Resource      string `json:"resource"`
			} `json:"resourceFieldRef"`
		} `json:"valueFrom"`
	} `json:"env"`
	Ports []struct {
		Name          string `json:"name"`
		ContainerPort int    `json:"containerPort"`
		Protocol      string `json:"protocol"`
	} `json:"ports"`
	StartupProbe    *probe `json:"startupProbe"`
	LivenessProbe   *probe `json:"livenessProbe"`
	ReadinessProbe  *probe `json:"readinessProbe"`
	SecurityContext *struct {
		RunAsNonRoot             *bool  `json:"runAsNonRoot"`
		RunAsUser                *int64 `json:"runAsUser"`
		RunAsGroup               *int64 `json:"runAsGroup"`
		AllowPrivilegeEscalation *bool  `json:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool  `json:"readOnlyRootFilesystem"`
		Capabilities             struct {
			Drop []string `json:"drop"`
		} `json:"capabilities"`
	} `json:"securityContext"`
	VolumeMounts []struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	} `json:"volumeMounts"`
	Resources resources `json:"resources"`
}

// probe is core/v1 Probe with an httpGet handler; the port must be a number.
type probe struct {
	HTTPGet *struct {
		Path   string `json:"path"`
		Port   int    `json:"port"`
		Scheme string `json:"scheme"`
	} `json:"httpGet"`
	InitialDelaySeconds int `json:"initialDelaySeconds"`
	PeriodSeconds       int `json:"periodSeconds"`
	TimeoutSeconds      int `json:"timeoutSeconds"`
	FailureThreshold    int `json:"failureThreshold"`
	SuccessThreshold    int `json:"successThreshold"`
}

// resources holds quantities as the strings the manifests write.
type resources struct {
	Requests map[string]string `json:"requests"`
	Limits   map[string]string `json:"limits"`
}

// inferenceService is the part of KServe's InferenceService
// (serving.kserve.io/v1beta1) the manifests use.
type inferenceService struct {
	typeMeta `json:",inline"`
	Spec     struct {
		Predictor struct {
			MinReplicas                   *int   `json:"minReplicas"`
			MaxReplicas                   int    `json:"maxReplicas"`
			ScaleMetric                   string `json:"scaleMetric"`
			ScaleTarget                   *int   `json:"scaleTarget"`
			TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
			AutoScaling                   *struct {
				Metrics []struct {
					Type     string `json:"type"`
					External *struct {
						Metric struct {
							Backend       string `json:"backend"`
							ServerAddress string `json:"serverAddress"`
							Query         string `json:"query"`
						} `json:"metric"`
						Target struct {
							Type  string `json:"type"`
							Value string `json:"value"`
						} `json:"target"`
					} `json:"external"`
				} `json:"metrics"`
			} `json:"autoScaling"`
			Model struct {
				ModelFormat struct {
					Name    string `json:"name"`
					Version string `json:"version"`
				} `json:"modelFormat"`
				Runtime         string    `json:"runtime"`
				ProtocolVersion string    `json:"protocolVersion"`
				StorageURI      string    `json:"storageUri"`
				Args            []string  `json:"args"`
				Resources       resources `json:"resources"`
			} `json:"model"`
		} `json:"predictor"`
	} `json:"spec"`
}

// grpcRoute is the part of Gateway API's GRPCRoute the manifest uses.
type grpcRoute struct {
	typeMeta `json:",inline"`
	Spec     struct {
		ParentRefs []struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"parentRefs"`
		Hostnames []string `json:"hostnames"`
		Rules     []struct {
			BackendRefs []struct {
				Name string `json:"name"`
				Port int    `json:"port"`
			} `json:"backendRefs"`
		} `json:"rules"`
	} `json:"spec"`
}

// manifests are the KServe files' documents, decoded strictly.
type manifests struct {
	runtimes map[string]*servingRuntime
	services []*inferenceService
	routes   []*grpcRoute
}

// documents splits a YAML file into its documents.
func documents(t *testing.T, name string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, name))
	require.NoError(t, err)
	var docs [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(raw), -1) {
		if strings.TrimSpace(regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")) != "" {
			docs = append(docs, []byte(d))
		}
	}
	require.NotEmpty(t, docs, "%s holds no document", name)
	return docs
}

// decode unmarshals one document strictly into v after checking its kind.
func decode(t *testing.T, file string, doc []byte, apiVersion, kind string, v any) {
	t.Helper()
	var tm typeMeta
	require.NoError(t, yaml.Unmarshal(doc, &tm), file)
	require.Equal(t, apiVersion+" "+kind, tm.APIVersion+" "+tm.Kind, "%s: document %q", file, tm.Metadata.Name)
	require.NoError(t, yaml.UnmarshalStrict(doc, v), "%s: %s %q", file, kind, tm.Metadata.Name)
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{runtimes: map[string]*servingRuntime{}}
	for _, doc := range documents(t, "kserve/servingruntime.yaml") {
		rt := &servingRuntime{}
		decode(t, "servingruntime.yaml", doc, "serving.kserve.io/v1alpha1", "ClusterServingRuntime", rt)
		require.NotContains(t, m.runtimes, rt.Metadata.Name, "runtime defined twice")
		m.runtimes[rt.Metadata.Name] = rt
	}
	for _, doc := range documents(t, "kserve/inferenceservice.yaml") {
		isvc := &inferenceService{}
		decode(t, "inferenceservice.yaml", doc, "serving.kserve.io/v1beta1", "InferenceService", isvc)
		m.services = append(m.services, isvc)
	}
	for _, doc := range documents(t, "kserve/grpcroute.yaml") {
		r := &grpcRoute{}
		decode(t, "grpcroute.yaml", doc, "gateway.networking.k8s.io/v1", "GRPCRoute", r)
		m.routes = append(m.routes, r)
	}
	return m
}

// serveContainer is the runtime's kserve-container, the one KServe starts
// the model server in.
func serveContainer(t *testing.T, rt *servingRuntime) *container {
	t.Helper()
	require.Len(t, rt.Spec.Containers, 1, "runtime %s", rt.Metadata.Name)
	c := &rt.Spec.Containers[0]
	require.Equal(t, "kserve-container", c.Name, "runtime %s: KServe runs the model server in kserve-container", rt.Metadata.Name)
	return c
}

// expandArgs renders the runtime's args as KServe does, with Go templates
// over the InferenceService's metadata ({{.Name}}), then appends the
// InferenceService's own args, as KServe concatenates them.
func expandArgs(t *testing.T, c *container, isvc *inferenceService) []string {
	t.Helper()
	var out []string
	for _, a := range c.Args {
		tmpl, err := template.New("arg").Option("missingkey=error").Parse(a)
		require.NoError(t, err, "arg %q", a)
		var b strings.Builder
		require.NoError(t, tmpl.Execute(&b, isvc.Metadata), "arg %q", a)
		out = append(out, b.String())
	}
	return append(out, isvc.Spec.Predictor.Model.Args...)
}

// parseArgs runs serve's flag parsing on args; a rejected arg fails the test
// with serve's own message.
func parseArgs(t *testing.T, args []string) *serveFlags {
	t.Helper()
	var errOut bytes.Buffer
	f, err := parseServe(args, &errOut)
	require.NoError(t, err, "inferbench serve %s: %s", strings.Join(args, " "), errOut.String())
	return f
}

func defaultFlags(t *testing.T) *serveFlags { return parseArgs(t, nil) }

// port is the TCP port of a listen address such as ":8000".
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err, "address %q", addr)
	n, err := strconv.Atoi(p)
	require.NoError(t, err, "address %q", addr)
	return n
}

// runtimeOf returns the runtime an InferenceService names.
func (m *manifests) runtimeOf(t *testing.T, isvc *inferenceService) *servingRuntime {
	t.Helper()
	rt, ok := m.runtimes[isvc.Spec.Predictor.Model.Runtime]
	require.True(t, ok, "InferenceService %s names runtime %q, which servingruntime.yaml does not define", isvc.Metadata.Name, isvc.Spec.Predictor.Model.Runtime)
	return rt
}

// effectiveFlags are the flags the server of isvc is started with.
func (m *manifests) effectiveFlags(t *testing.T, isvc *inferenceService) *serveFlags {
	t.Helper()
	return parseArgs(t, expandArgs(t, serveContainer(t, m.runtimeOf(t, isvc)), isvc))
}

func TestDeployContainerArgsAreServeFlags(t *testing.T) {
	m := loadManifests(t)
	require.NotEmpty(t, m.services)
	used := map[string]bool{}
	for _, isvc := range m.services {
		name := isvc.Metadata.Name
		t.Run(name, func(t *testing.T) {
			rt := m.runtimeOf(t, isvc)
			used[rt.Metadata.Name] = true
			f := m.effectiveFlags(t, isvc)
			_, err := backend.Lookup(f.cfg.BackendName)
			assert.NoError(t, err, "-backend: a back-end serve registers")
			assert.Equal(t, name, f.modelName, "-model-name: clients address the model by the InferenceService's name")
			assert.True(t, strings.HasPrefix(f.cfg.Checkpoint, "/mnt/models/"), "-checkpoint %q: KServe's storage initializer puts the model under /mnt/models", f.cfg.Checkpoint)
			assert.False(t, f.sharedMemory().Enabled, "-shm: no client outside the pod shares its /dev/shm")
		})
	}
	for name := range m.runtimes {
		assert.True(t, used[name], "runtime %s: no InferenceService example uses it, so its args were not parsed", name)
	}
}

func TestDeployPortsAreServeDefaults(t *testing.T) {
	def := defaultFlags(t)
	m := loadManifests(t)
	for _, isvc := range m.services {
		t.Run(isvc.Metadata.Name, func(t *testing.T) {
			f := m.effectiveFlags(t, isvc)
			for _, a := range []struct{ flag, got, want string }{
				{"-http-addr", f.httpAddr, def.httpAddr},
				{"-grpc-addr", f.grpcAddr, def.grpcAddr},
				{"-metrics-addr", f.metricsAddr, def.metricsAddr},
			} {
				assert.Equal(t, a.want, a.got, "%s: the manifests and images assume the default", a.flag)
			}
			c := serveContainer(t, m.runtimeOf(t, isvc))
			require.Len(t, c.Ports, 2, "ports: HTTP then gRPC")
			// KServe's Service sends port 80 to the first port, and its
			// ingress routes there: that must be HTTP.
			assert.Equal(t, port(t, f.httpAddr), c.Ports[0].ContainerPort, "first port: HTTP")
			assert.Equal(t, "http1", c.Ports[0].Name)
			assert.Equal(t, port(t, f.grpcAddr), c.Ports[1].ContainerPort, "second port: gRPC")
			assert.Equal(t, "h2c", c.Ports[1].Name, "KServe and Knative recognise gRPC (HTTP/2 cleartext) by the port name h2c")
			for _, p := range c.Ports {
				assert.Equal(t, "TCP", p.Protocol, "port %s", p.Name)
			}
		})
	}
}

// probes lists a container's probes by name.
func probes(c *container) map[string]*probe {
	return map[string]*probe{"startupProbe": c.StartupProbe, "livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe}
}

// testService serves the model that f describes, shrunk to the tiny
// network on the CPU back-end so that it starts in a test: the front door
// (routes, health, metrics) is the one serve builds from f.
func testService(t *testing.T, f *serveFlags) *protocol.Service {
	t.Helper()
	args := []string{"-checkpoint=", "-model=tiny", "-size=32x32", "-backend=cpu", "-precision=fp32", "-graphs=false",
		"-workers=1", "-devices=0", "-max-batch=2", "-batches=1", "-max-queue-delay=0", "-preferred-batches=",
		"-model-name=" + f.modelName, "-model-version=" + f.modelVersion,
		"-uint8-mean=" + f.uint8Mean, "-uint8-std=" + f.uint8Std}
	small := parseArgs(t, args)
	cfg, err := small.config()
	require.NoError(t, err)
	srv, err := inference.New(cfg)
	require.NoError(t, err)
	model, err := protocol.NewModel(srv, protocol.ModelConfig{Name: small.modelName, Version: small.modelVersion, Normalization: small.norm})
	require.NoError(t, err)
	svc := protocol.New(model, protocol.Options{Version: "test", SharedMemory: f.sharedMemory()})
	t.Cleanup(func() {
		svc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return svc
}

// get answers a GET of path from h, as a kubelet probe or Prometheus would.
func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	ts := httptest.NewServer(h)
	defer ts.Close()
	resp, err := http.Get(ts.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// probeOK is a kubelet's rule for an HTTP probe's success.
func probeOK(code int) bool { return code >= 200 && code < 400 }

func TestDeployProbesHitServedHealthEndpoints(t *testing.T) {
	m := loadManifests(t)
	for _, isvc := range m.services {
		t.Run(isvc.Metadata.Name, func(t *testing.T) {
			f := m.effectiveFlags(t, isvc)
			c := serveContainer(t, m.runtimeOf(t, isvc))
			for name, p := range probes(c) {
				require.NotNil(t, p, "%s missing", name)
				require.NotNil(t, p.HTTPGet, "%s: an httpGet probe on the HTTP port", name)
				assert.Equal(t, port(t, f.httpAddr), p.HTTPGet.Port, "%s: port", name)
				assert.Contains(t, []string{"", "HTTP"}, p.HTTPGet.Scheme, "%s: the server speaks plain HTTP", name)
			}
			svc := testService(t, f)
			h := svc.HTTPHandler()
			for name, p := range probes(c) {
				code, _ := get(t, h, p.HTTPGet.Path)
				assert.True(t, probeOK(code), "%s: GET %s = %d on a ready server, want 2xx or 3xx", name, p.HTTPGet.Path, code)
			}
			// On SIGTERM serve drains: readiness must fail, so that the pod
			// leaves the Service's endpoints, while liveness and startup
			// still pass, so that the kubelet does not restart it mid-drain.
			svc.Drain()
			for name, p := range probes(c) {
				code, _ := get(t, h, p.HTTPGet.Path)
				if name == "readinessProbe" {
					assert.False(t, probeOK(code), "%s: GET %s = %d while draining, want a failure", name, p.HTTPGet.Path, code)
				} else {
					assert.True(t, probeOK(code), "%s: GET %s = %d while draining, want success", name, p.HTTPGet.Path, code)
				}
			}
		})
	}
}

func TestDeployMetricsAnnotationsPointAtMetricsPort(t *testing.T) {
	m := loadManifests(t)
	for _, isvc := range m.services {
		t.Run(isvc.Metadata.Name, func(t *testing.T) {
			f := m.effectiveFlags(t, isvc)
			ann := m.runtimeOf(t, isvc).Spec.Annotations
			metricsPort := strconv.Itoa(port(t, f.metricsAddr))
			assert.Equal(t, "true", ann["prometheus.io/scrape"])
			assert.Equal(t, metricsPort, ann["prometheus.io/port"], "prometheus.io/port")
			assert.Equal(t, metricsPort, ann["prometheus.kserve.io/port"], "prometheus.kserve.io/port")
			assert.Equal(t, ann["prometheus.io/path"], ann["prometheus.kserve.io/path"])
			svc := testService(t, f)
			code, body := get(t, metricsHandler(svc), ann["prometheus.io/path"])
			require.Equal(t, http.StatusOK, code, "GET %s on the metrics listener", ann["prometheus.io/path"])
			assert.Contains(t, body, "nv_inference_request_success{", "the scrape holds the model's metrics")
		})
	}
}

// memoryBytes parses a Kubernetes memory quantity of the forms the manifests
// use: a number of bytes, or one with a binary (Ki, Mi, Gi, Ti) or decimal
// (k, M, G, T) suffix.
func memoryBytes(t *testing.T, q string) int64 {
	t.Helper()
	mult := map[string]int64{"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
	m := regexp.MustCompile(`^([0-9]+)([KMGT]i|[kMGT])?$`).FindStringSubmatch(q)
	require.NotNil(t, m, "memory quantity %q", q)
	n, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	return n * mult[m[2]]
}

// effectiveResources merges the InferenceService's resources over the
// runtime's, key by key, as KServe's strategic merge does.
func effectiveResources(c *container, isvc *inferenceService) resources {
	r := resources{Requests: map[string]string{}, Limits: map[string]string{}}
	for _, src := range []resources{c.Resources, isvc.Spec.Predictor.Model.Resources} {
		for k, v := range src.Requests {
			r.Requests[k] = v
		}
		for k, v := range src.Limits {
			r.Limits[k] = v
		}
	}
	return r
}

// metricNames lists the metric names of a Prometheus text scrape.
func metricNames(scrape string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(scrape))
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			names[regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`).FindString(line)] = true
		}
	}
	return names
}

func TestDeployInferenceServicesFitTheirRuntime(t *testing.T) {
	m := loadManifests(t)
	for _, isvc := range m.services {
		t.Run(isvc.Metadata.Name, func(t *testing.T) {
			p := isvc.Spec.Predictor
			rt := m.runtimeOf(t, isvc)
			c := serveContainer(t, rt)
			f := m.effectiveFlags(t, isvc)

			var formats []string
			for _, sf := range rt.Spec.SupportedModelFormats {
				formats = append(formats, sf.Name+"/"+sf.Version)
			}
			assert.Contains(t, formats, p.Model.ModelFormat.Name+"/"+p.Model.ModelFormat.Version, "model format")
			assert.Contains(t, rt.Spec.ProtocolVersions, p.Model.ProtocolVersion, "protocolVersion")
			assert.Subset(t, rt.Spec.ProtocolVersions, []string{"v2", "grpc-v2"}, "the runtime serves the v2 protocol over HTTP and gRPC")
			assert.NotEmpty(t, p.Model.StorageURI, "storageUri")

			// Knative (Serverless mode) takes one container port; these
			// runtimes have two, so KServe must deploy them raw.
			if len(c.Ports) > 1 {
				assert.Equal(t, "RawDeployment", isvc.Metadata.Annotations["serving.kserve.io/deploymentMode"], "deploymentMode with %d container ports", len(c.Ports))
				// KServe's pod mutator, when this is true, points
				// prometheus.io/port at queue-proxy, which only Serverless
				// pods have.
				assert.NotEqual(t, "true", isvc.Metadata.Annotations["serving.kserve.io/enable-prometheus-scraping"], "enable-prometheus-scraping in RawDeployment")
			}

			// The kubelet kills the container terminationGracePeriodSeconds
			// after SIGTERM; serve needs -drain-delay and then the rest of
			// -grace to answer what it accepted.
			require.NotNil(t, p.TerminationGracePeriodSeconds, "terminationGracePeriodSeconds (Kubernetes' default, 30 s, is serve's default -grace)")
			tgp := time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
			assert.Greater(t, tgp, f.grace+f.drainDelay, "terminationGracePeriodSeconds vs -grace %v + -drain-delay %v", f.grace, f.drainDelay)
			assert.Less(t, f.drainDelay, f.grace, "-drain-delay counts within -grace: it must leave time to answer accepted requests")

			res := effectiveResources(c, isvc)
			require.Contains(t, res.Limits, "memory", "memory limit")
			assert.Less(t, f.inflightBytes, memoryBytes(t, res.Limits["memory"]), "-inflight-bytes (request buffers) must fit in the memory limit %s", res.Limits["memory"])
			if f.cfg.BackendName == "cuda" {
				assert.Equal(t, "1", res.Limits["nvidia.com/gpu"], "nvidia.com/gpu: one GPU per replica")
				assert.Equal(t, []int{0}, f.cfg.Devices, "-devices: the pod's one GPU")
			} else {
				assert.NotContains(t, res.Limits, "nvidia.com/gpu", "a GPU for the %s back-end", f.cfg.BackendName)
			}

			require.NotNil(t, p.MinReplicas, "minReplicas")
			assert.GreaterOrEqual(t, *p.MinReplicas, 1, "minReplicas: RawDeployment does not scale to zero")
			assert.GreaterOrEqual(t, p.MaxReplicas, *p.MinReplicas, "maxReplicas")
		})
	}
}

func TestDeployAutoscalingQueriesReadServedMetrics(t *testing.T) {
	m := loadManifests(t)
	queries := 0
	for _, isvc := range m.services {
		if isvc.Spec.Predictor.AutoScaling == nil {
			continue
		}
		t.Run(isvc.Metadata.Name, func(t *testing.T) {
			f := m.effectiveFlags(t, isvc)
			_, scrape := get(t, metricsHandler(testService(t, f)), "/metrics")
			served := metricNames(scrape)
			for _, metric := range isvc.Spec.Predictor.AutoScaling.Metrics {
				if metric.Type != "External" {
					continue
				}
				queries++
				require.NotNil(t, metric.External)
				q := metric.External.Metric.Query
				assert.Equal(t, "prometheus", metric.External.Metric.Backend)
				names := regexp.MustCompile(`\b(nv_inference_[a-z_]+|inferbench_[a-z_]+)\b`).FindAllString(q, -1)
				require.NotEmpty(t, names, "query %q reads none of the server's metrics", q)
				for _, n := range names {
					assert.True(t, served[n], "query %q: the server exports no metric %s", q, n)
				}
				assert.Contains(t, q, fmt.Sprintf(`model=%q`, f.modelName), "query %q: select this model's series", q)
				_, err := strconv.ParseFloat(metric.External.Target.Value, 64)
				assert.NoError(t, err, "target value %q", metric.External.Target.Value)
			}
		})
	}
	assert.Positive(t, queries, "no External metric to check")
}

func TestDeployGRPCRouteTargetsGRPCPort(t *testing.T) {
	m := loadManifests(t)
	require.NotEmpty(t, m.routes)
	predictors := map[string]*inferenceService{}
	for _, isvc := range m.services {
		predictors[isvc.Metadata.Name+"-predictor"] = isvc
	}
	for _, r := range m.routes {
		t.Run(r.Metadata.Name, func(t *testing.T) {
			require.NotEmpty(t, r.Spec.Hostnames)
			require.NotEmpty(t, r.Spec.Rules)
			for _, rule := range r.Spec.Rules {
				require.NotEmpty(t, rule.BackendRefs)
				for _, b := range rule.BackendRefs {
					isvc, ok := predictors[b.Name]
					require.True(t, ok, "backend %s: not the predictor Service (<name>-predictor) of an InferenceService in inferenceservice.yaml", b.Name)
					f := m.effectiveFlags(t, isvc)
					assert.Equal(t, port(t, f.grpcAddr), b.Port, "backend %s: the gRPC port", b.Name)
				}
			}
		})
	}
}

// instruction is one Dockerfile instruction: its keyword in upper case and
// its arguments, continuation lines joined.
type instruction struct{ cmd, args string }

// dockerStage is a build stage: its FROM line and the instructions after it.
type dockerStage struct {
	from  string
	instr []instruction
}

// parseDockerfile splits a Dockerfile into stages. It handles comments and
// backslash continuations, which is all ours use.
func parseDockerfile(t *testing.T, name string) []dockerStage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, name))
	require.NoError(t, err)
	var stages []dockerStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{strings.ToUpper(cmd), strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stages = append(stages, dockerStage{from: in.args})
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
		}
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`) + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	require.NotEmpty(t, stages, "%s: no FROM", name)
	return stages
}

// all returns the arguments of every instruction cmd in the stage.
func (s dockerStage) all(cmd string) []string {
	var out []string
	for _, in := range s.instr {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// goMinor is the "1.N" of a Go version such as "1.26.0".
func goMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

func TestDeployDockerfiles(t *testing.T) {
	def := defaultFlags(t)
	gomod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	goVersion := regexp.MustCompile(`(?m)^go ([0-9.]+)$`).FindStringSubmatch(string(gomod))
	require.NotNil(t, goVersion, "go.mod's go directive")

	for _, tc := range []struct {
		file      string
		final     *regexp.Regexp // the final stage's base image
		cgo, tags string         // in the build stage's go build
	}{
		{"Dockerfile", regexp.MustCompile(`^(scratch|gcr\.io/distroless/static\S*)$`), "CGO_ENABLED=0", ""},
		{"Dockerfile.gpu", regexp.MustCompile(`^nvidia/cuda:[0-9.]+-cudnn-runtime-ubuntu[0-9.]+$`), "CGO_ENABLED=1", "-tags cuda"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			stages := parseDockerfile(t, tc.file)
			require.GreaterOrEqual(t, len(stages), 2, "a multi-stage build")
			build, final := stages[0], stages[len(stages)-1]

			// The build stage: the Go of go.mod, the right cgo setting and
			// tags, the command's package.
			from := regexp.MustCompile(`^golang:\$\{GO_VERSION\}-\S+ AS (\S+)$`).FindStringSubmatch(build.from)
			require.NotNil(t, from, "build stage FROM %q: golang:${GO_VERSION}-... AS name", build.from)
			raw, err := os.ReadFile(filepath.Join(deployDir, tc.file))
			require.NoError(t, err)
			arg := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)$`).FindStringSubmatch(string(raw))
			require.NotNil(t, arg, "ARG GO_VERSION")
			assert.Equal(t, goMinor(goVersion[1]), arg[1], "GO_VERSION: the Go release go.mod asks for")
			var gobuild string
			for _, r := range build.all("RUN") {
				if strings.Contains(r, "go build") {
					gobuild = r
				}
			}
			require.NotEmpty(t, gobuild, "build stage: a RUN with go build")
			assert.Contains(t, gobuild, tc.cgo)
			assert.Contains(t, gobuild, "./cmd/inferbench")
			if tc.tags != "" {
				assert.Contains(t, gobuild, tc.tags)
			} else {
				assert.NotContains(t, gobuild, "-tags")
			}

			// The final stage: the base, the binary from the build stage,
			// an unprivileged user, the server's ports, serve as entrypoint.
			assert.Regexp(t, tc.final, final.from, "final stage FROM")
			assert.Contains(t, final.all("COPY"), "--from="+from[1]+" /out/inferbench /inferbench")
			users := final.all("USER")
			require.Len(t, users, 1, "USER in the final stage")
			uid, _, _ := strings.Cut(users[0], ":")
			n, err := strconv.Atoi(uid)
			require.NoError(t, err, "USER %q: numeric, so runAsNonRoot can check it", users[0])
			assert.NotZero(t, n, "USER: not root")
			var exposed []int
			for _, e := range final.all("EXPOSE") {
				for _, p := range strings.Fields(e) {
					n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
					require.NoError(t, err, "EXPOSE %q", p)
					exposed = append(exposed, n)
				}
			}
			assert.ElementsMatch(t, []int{port(t, def.httpAddr), port(t, def.grpcAddr), port(t, def.metricsAddr)}, exposed, "EXPOSE: serve's default ports")
			entry := final.all("ENTRYPOINT")
			require.Len(t, entry, 1, "ENTRYPOINT")
			var argv []string
			require.NoError(t, json.Unmarshal([]byte(entry[0]), &argv), "ENTRYPOINT %s: exec form, so SIGTERM reaches serve", entry[0])
			assert.Equal(t, []string{"/inferbench", "serve"}, argv)
		})
	}
}

// env returns the stage's ENV settings (KEY=value pairs, several per line).
func (s dockerStage) env() map[string]string {
	out := map[string]string{}
	for _, e := range s.all("ENV") {
		for _, kv := range strings.Fields(e) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				out[k] = v
			}
		}
	}
	return out
}

func TestDeployRuntimesFitTheirImage(t *testing.T) {
	m := loadManifests(t)
	images := map[string]string{"cpu": "Dockerfile", "cuda": "Dockerfile.gpu"}
	for _, isvc := range m.services {
		t.Run(isvc.Metadata.Name, func(t *testing.T) {
			f := m.effectiveFlags(t, isvc)
			rt := m.runtimeOf(t, isvc)
			c := serveContainer(t, rt)
			file, ok := images[f.cfg.BackendName]
			require.True(t, ok, "no image for -backend %s", f.cfg.BackendName)
			raw, err := os.ReadFile(filepath.Join(deployDir, file))
			require.NoError(t, err)
			tag := regexp.MustCompile(`docker build -f deploy/` + regexp.QuoteMeta(file) + ` -t (\S+) \.`).FindSubmatch(raw)
			require.NotNil(t, tag, "%s: its build command in the header", file)
			assert.Equal(t, string(tag[1]), c.Image, "image: the tag %s's build command gives", file)

			stages := parseDockerfile(t, file)
			final := stages[len(stages)-1]
			users := final.all("USER")
			require.Len(t, users, 1)
			uid, err := strconv.ParseInt(strings.SplitN(users[0], ":", 2)[0], 10, 64)
			require.NoError(t, err)
			sc := c.SecurityContext
			require.NotNil(t, sc, "securityContext")
			require.NotNil(t, sc.RunAsUser, "runAsUser")
			assert.Equal(t, uid, *sc.RunAsUser, "runAsUser: the image's USER")
			require.NotNil(t, sc.RunAsNonRoot)
			assert.True(t, *sc.RunAsNonRoot, "runAsNonRoot")

			// A read-only root file system needs a writable volume wherever
			// the image tells the server to write.
			if cache, ok := final.env()["INFERBENCH_CUDNN_CACHE"]; ok && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
				volumes := map[string]bool{}
				for _, v := range rt.Spec.Volumes {
					volumes[v.Name] = true
				}
				mounted := false
				for _, vm := range c.VolumeMounts {
					if vm.MountPath == filepath.Dir(cache) {
						mounted = true
						assert.True(t, volumes[vm.Name], "volumeMount %s: no such volume in the runtime", vm.Name)
					}
				}
				assert.True(t, mounted, "INFERBENCH_CUDNN_CACHE=%s: no volume mounted at %s under a read-only root", cache, filepath.Dir(cache))
			}
		})
	}
}
