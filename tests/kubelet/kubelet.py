"""A test kubelet: the kubelet side of the Device Plugin API v1beta1, written
independently of the plugin from the same .proto files (Debian's grpcio and
grpc_tools, /usr/bin/python3).

It serves Registration on <dir>/kubelet.sock and, inside Register, dials the
plugin back and calls GetDevicePluginOptions (as the real kubelet does, so a
plugin that registers before serving fails). It consumes ListAndWatch, picks
device IDs (with or without GetPreferredAllocation, filling gaps itself),
calls Allocate one container at a time, can restart (delete every socket,
recreate kubelet.sock) or drop the stream, and optionally serves the
PodResources List API."""

import glob
import os
import random
import subprocess
import sys
import threading
import time
from concurrent import futures

API_VERSION = "v1beta1"


def generate_stubs(proto_dir, out_dir):
    """Compiles the .proto files into out_dir and makes them importable."""
    os.makedirs(out_dir, exist_ok=True)
    protos = sorted(glob.glob(os.path.join(proto_dir, "*.proto")))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + proto_dir,
                    "--python_out=" + out_dir, "--grpc_python_out=" + out_dir] + protos,
                   check=True)
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)


class Snapshot:
    def __init__(self, response):
        self.devices = {}  # id -> (health, [numa nodes])
        for d in response.devices:
            self.devices[d.ID] = (d.health, [n.ID for n in d.topology.nodes])

    def healthy(self):
        return sorted(i for i, (h, _) in self.devices.items() if h == "Healthy")

    def unhealthy(self):
        return sorted(i for i, (h, _) in self.devices.items() if h != "Healthy")


class Endpoint:
    """What the kubelet holds for one registered resource: the plugin's
    socket, options, ListAndWatch stream and snapshots, and the IDs it has
    allocated from that resource."""

    def __init__(self, kubelet, resource_name):
        self.kubelet = kubelet
        self.pb = kubelet.pb
        self.resource_name = resource_name
        self.snapshots = []  # Snapshot, in arrival order, across streams
        self.options = None
        self.endpoint = None
        self.channel = None
        self.stub = None
        self.stream = None
        self.allocated = set()

    def _watch(self, stub):
        stream = stub.ListAndWatch(self.pb.Empty())
        with self.kubelet.cond:
            self.stream = stream
        try:
            for response in stream:
                with self.kubelet.cond:
                    self.snapshots.append(Snapshot(response))
                    self.kubelet.cond.notify_all()
        except self.kubelet.grpc.RpcError:
            pass

    def _cancel_stream(self):
        with self.kubelet.cond:
            stream, self.stream = self.stream, None
        if stream is not None:
            stream.cancel()

    def drop_stream(self):
        """Cancels ListAndWatch without calling it again (the plugin must re-register)."""
        self._cancel_stream()

    def wait_for_snapshot(self, predicate=lambda s: True, timeout=10.0, what="a snapshot"):
        self.kubelet.wait_for(lambda: self.snapshots and predicate(self.snapshots[-1]), timeout,
                              what + " of " + self.resource_name)
        return self.snapshots[-1]

    def latest(self):
        with self.kubelet.cond:
            return self.snapshots[-1]

    def choose(self, n, use_preferred=True, must_include=()):
        """The kubelet's choice of n IDs: preferred allocation as a hint, then
        arbitrary free healthy IDs for any gap."""
        free = [i for i in self.latest().healthy() if i not in self.allocated]
        chosen = list(must_include)
        if use_preferred and self.options.get_preferred_allocation_available:
            req = self.pb.PreferredAllocationRequest(container_requests=[
                self.pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=free + list(must_include),
                    must_include_deviceIDs=list(must_include), allocation_size=n)])
            resp = self.stub.GetPreferredAllocation(req, timeout=10)
            for i in resp.container_responses[0].deviceIDs:
                if i in free and i not in chosen and len(chosen) < n:
                    chosen.append(i)
        rest = [i for i in free if i not in chosen]
        random.shuffle(rest)
        while len(chosen) < n and rest:
            chosen.append(rest.pop())
        if len(chosen) < n:
            raise AssertionError("only %d free IDs for a request of %d" % (len(chosen), n))
        return chosen

    def allocate(self, ids):
        """One Allocate RPC for one container; returns its ContainerAllocateResponse."""
        req = self.pb.AllocateRequest(
            container_requests=[self.pb.ContainerAllocateRequest(devices_ids=list(ids))])
        resp = self.stub.Allocate(req, timeout=10)
        assert len(resp.container_responses) == 1
        self.allocated.update(ids)
        return resp.container_responses[0]


class TestKubelet:
    """Registration for any number of resources, one Endpoint each. Attributes
    and methods of an Endpoint (stub, snapshots, latest(), allocate(), ...)
    used on the kubelet itself are those of `resource_name`'s."""

    def __init__(self, plugin_dir, resource_name="cushare.io/vgpu"):
        import grpc
        import device_plugin_v1beta1_pb2 as pb
        import device_plugin_v1beta1_pb2_grpc as pbg
        self.grpc, self.pb, self.pbg = grpc, pb, pbg
        self.dir = plugin_dir
        self.resource_name = resource_name
        self.cond = threading.Condition()
        self.registrations = []  # RegisterRequest of every successful Register
        self.register_errors = []
        self.endpoints = {resource_name: Endpoint(self, resource_name)}
        self.server = None
        self.pods = {}  # pod name -> list of device-id lists (one per container)
        self.pod_resources_server = None

    def __getattr__(self, name):
        # Only reached for names the kubelet itself lacks.
        endpoints = self.__dict__.get("endpoints")
        if endpoints is None:
            raise AttributeError(name)
        return getattr(endpoints[self.__dict__["resource_name"]], name)

    def resource(self, resource_name):
        """The Endpoint of one resource (made on first use, filled when it registers)."""
        with self.cond:
            if resource_name not in self.endpoints:
                self.endpoints[resource_name] = Endpoint(self, resource_name)
            return self.endpoints[resource_name]

    # ------------------------------------------------------------ serving --
    def start(self):
        kubelet = self

        class Registration(self.pbg.RegistrationServicer):
            def Register(self, request, context):
                return kubelet._register(request, context)

        self.server = self.grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.pbg.add_RegistrationServicer_to_server(Registration(), self.server)
        self.server.add_insecure_port("unix://" + os.path.join(self.dir, "kubelet.sock"))
        self.server.start()

    def stop(self):
        self._cancel_streams()
        if self.server:
            self.server.stop(0).wait()
            self.server = None
        if self.pod_resources_server:
            self.pod_resources_server.stop(0).wait()
            self.pod_resources_server = None

    def restart(self):
        """Like a kubelet restart: the old server goes, every socket in the
        folder is deleted, a fresh kubelet.sock is served."""
        self._cancel_streams()
        self.server.stop(0).wait()
        for path in glob.glob(os.path.join(self.dir, "*")):
            if os.path.basename(path) != "kubelet_internal_checkpoint":
                os.unlink(path)
        time.sleep(0.1)
        self.start()

    def _cancel_streams(self):
        for e in list(self.endpoints.values()):
            e._cancel_stream()

    def _register(self, request, context):
        grpc = self.grpc
        if request.version != API_VERSION:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version " + request.version)
        if "/" not in request.resource_name or request.resource_name.startswith("kubernetes.io/"):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad resource " + request.resource_name)
        # Dial back and read the options inside Register, as the kubelet does.
        channel = grpc.insecure_channel("unix://" + os.path.join(self.dir, request.endpoint))
        stub = self.pbg.DevicePluginStub(channel)
        try:
            options = stub.GetDevicePluginOptions(self.pb.Empty(), timeout=10)
        except grpc.RpcError as e:
            with self.cond:
                self.register_errors.append(str(e))
                self.cond.notify_all()
            context.abort(grpc.StatusCode.UNAVAILABLE, "cannot dial plugin: %s" % e)
        endpoint = self.resource(request.resource_name)
        endpoint._cancel_stream()  # a re-registration replaces that resource's stream only
        with self.cond:
            endpoint.channel, endpoint.stub, endpoint.options = channel, stub, options
            endpoint.endpoint = request.endpoint
            self.registrations.append(request)
            self.cond.notify_all()
        threading.Thread(target=endpoint._watch, args=(stub,), daemon=True).start()
        return self.pb.Empty()

    # ------------------------------------------------------------ waiting --
    def wait_for(self, predicate, timeout=10.0, what="condition"):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out waiting for " + what)
                self.cond.wait(left)

    def wait_for_registrations(self, n, timeout=10.0):
        self.wait_for(lambda: len(self.registrations) >= n, timeout, "%d registration(s)" % n)

    def serve_pod_resources(self, socket_path):
        import pod_resources_v1_pb2 as prpb
        import pod_resources_v1_pb2_grpc as prg
        kubelet = self

        class Lister(prg.PodResourcesListerServicer):
            def List(self, request, context):
                resp = prpb.ListPodResourcesResponse()
                with kubelet.cond:
                    pods = dict(kubelet.pods)
                for name, containers in pods.items():
                    pod = resp.pod_resources.add(name=name, namespace="default")
                    for i, ids in enumerate(containers):
                        c = pod.containers.add(name="c%d" % i)
                        c.devices.add(resource_name=kubelet.resource_name, device_ids=ids)
                return resp

        self.pod_resources_server = self.grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        prg.add_PodResourcesListerServicer_to_server(Lister(), self.pod_resources_server)
        self.pod_resources_server.add_insecure_port("unix://" + socket_path)
        self.pod_resources_server.start()


def container_view(response):
    """How a container would see an Allocate response, without bind mounts:
    returns (env, path_of) where path_of maps a container path to the host
    path that backs it (longest mount prefix wins, as with real mounts)."""
    env = dict(response.envs)
    mounts = sorted(((m.container_path, m.host_path) for m in response.mounts),
                    key=lambda m: len(m[0]), reverse=True)

    def path_of(container_path):
        for cpath, hpath in mounts:
            if container_path == cpath:
                return hpath
            if container_path.startswith(cpath.rstrip("/") + "/"):
                return hpath + container_path[len(cpath.rstrip("/")):]
        raise KeyError("no mount backs " + container_path)

    return env, path_of
