"""Dynamic Resource Allocation (``resource.k8s.io/v1``) in the simulated cluster.

* ``semver``, ``celenv``: CEL for device selectors (cel-python plus Kubernetes' extensions);
* ``api``: defaulting and validation of DeviceClass, ResourceSlice, ResourceClaim(Template);
* ``pools``: the devices a node can use, gathered from complete resource pools;
* ``allocator``: the structured-parameters allocator (pure);
* ``nvidia``: ResourceSlices as NVIDIA's GPU DRA driver publishes them, from a small spec;
* ``claimcontroller``: the resource claim controller (claims from templates, reservations);
* ``plugin``: the scheduler's DynamicResources plugin (PreEnqueue/PreFilter/Filter/PostFilter/PreBind);
* ``kubeletenv``: what the kubelet gives a container for its allocated devices.
"""
