"""``GPUSpawner``: KubeSpawner plus GPU profiles built from live cluster capacity (``GPUSpawnerSettings`` re-exported)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from kubespawner import KubeSpawner
from traitlets import default

from gpuspawner.hub import capacity_access, dra_templates, gpu_hours, gpu_metrics, kueue_wait, unseen_pod
from gpuspawner.hub import listen_wait, lost_replies, plan_apply, pod_wait, reaper, refusals, scale_up_timeout
from gpuspawner.hub import spawn_page
from gpuspawner.hub.pod_wait import GPUSpawnInfo, SpawnRecord
from gpuspawner.hub.reaper import OrphanPodSettings
from gpuspawner.hub.settings import GPUSpawnerSettings
from gpuspawner.hub.spawner_traits import GPU_COUNT_LIMIT_MAX, GPUSpawnTraits, applied_in_load_user_options
from gpuspawner.spawn.options import OTHER as REFUSED_OTHER
from gpuspawner.spawn.plan import PlanRefusal, fill_pod, plan_spawn

__all__ = ["GPUSpawnerSettings", "GPUSpawner", "GPUSpawnInfo", "GPU_COUNT_LIMIT_MAX", "applied_in_load_user_options",
           "capacity_settings_class"]


class GPUSpawner(GPUSpawnTraits, KubeSpawner, GPUSpawnerSettings, OrphanPodSettings):
    """KubeSpawner with GPU profiles whose pools come from live capacity."""

    # GPUs this server holds or is starting with, once its request passed the quota check (0:
    # refused or no GPU); None: not checked yet. Kept in the spawner's state so a restarted hub
    # still counts running servers.
    gpu_held: int | None = None
    gpu_stop_message: str | None = None  # why Kueue stopped this server last (hub/kueue_wait.py note_stopped)
    _spawn: SpawnRecord = SpawnRecord()  # this spawn, from its start to its stop (hub/pod_wait.py)
    _gpu_ledger_checked = False  # its first poll has made sure a running GPU server has its holding
    _admin_start_timeout: float | None = None
    _admin_http_timeout: int | None = None  # hub/listen_wait.py cuts http_timeout for one spawn

    @default("options_form")
    def _options_form_default(self):
        if not self.gpu_profiles:
            return super()._options_form_default()
        return spawn_page.render_page  # called with the spawner: the page, from its one cache

    def _render_options_form(self, profile_list, gpu_offers=None, initialized=False, cull_rules=None):
        """KubeSpawner's renderer, with autoescaping and the GPU offers (``spawn_page.render_form``)."""
        return spawn_page.render_form(self, profile_list, gpu_offers, initialized, cull_rules)

    def capacity_cache(self):
        """The shared ``CapacityCache``, or None when it cannot start (logged once)."""
        return capacity_access.cache_of(self)

    def kueue_view(self):
        return super().kueue_view(self.namespace)

    async def options_from_query(self, query_data):
        """A query-string spawn (``/hub/spawn/<user>?profile=gpu&gpu_pool=...&gpus=2``), read and checked
        before JupyterHub saves anything (``refusals.read_query``)."""
        return await refusals.read_query(self, query_data)

    async def _options_from_form(self, formdata):
        """A spawn form post, read by the query's rules and checked before JupyterHub saves anything
        (``refusals.read_form``). An admin's own ``options_from_form`` replaces this one."""
        return await refusals.read_form(self, formdata)

    async def check_options_to_save(self, options, *, spawn: bool) -> None:
        """Refuse options no capacity could make right before JupyterHub saves them (``hub.guard``)."""
        await refusals.check_options(self, options, spawn=spawn)

    async def load_user_options(self):
        """Gather the request, plan it (``spawn.plan``), count a refusal, apply the plan. Every user
        mistake, and an image no node of the pool can run, is an HTTP 400 before any pod exists."""
        try:
            self.release_gpus()
            plan_apply.restore_traits(self)
            self._spawn = pod_wait.renewed(self._spawn, start=False)
            self.gpu_held = None  # unknown until this request passes its quota check
            request = await plan_apply.gather(self)
            # from here to `self.gpu_held = ...` nothing awaits: two spawns of a user cannot both pass
            plan = plan_spawn(request, plan_apply.policy_of(self))
            if isinstance(plan, PlanRefusal):
                raise refusals.refuse_plan(self, plan, request.profile_list, request.view.offers) from None
            if plan.gpus:
                refusals.check_budget(self, plan.selection)
            self.gpu_held = plan.gpus
            if not request.profile_list:
                return
            try:
                self._load_profile(plan.selection.profile, list(plan.profiles))
            except ValueError as e:  # KubeSpawner: an option with only a free-text choice and no value
                refusals.count(self, REFUSED_OTHER, request.profile_list, request.view.offers)
                raise refusals.refuse(self, 400, f"{e} Choose a value for it on the spawn form or in user options.",
                                      reason=REFUSED_OTHER) from None
            if plan.selection.offer is None:
                return
            # the profile's image and pod traits are KubeSpawner's now: the GPU pool adds to them
            plan = fill_pod(plan, plan_apply.pod_traits(self), plan_apply.policy_of(self))
            if isinstance(plan, PlanRefusal):
                raise refusals.refuse_plan(self, plan, request.profile_list, request.view.offers) from None
            plan_apply.apply(self, plan)
        finally:
            pod_wait.notes_known(self)

    def release_gpus(self) -> None:
        """Give back GPUs reserved for this server's pod (a no-op if none)."""
        reservation = self._spawn.reservation
        if reservation is None:
            return
        self._spawn = replace(self._spawn, reservation=None)
        cache, owner = reservation
        try:
            cache.release(owner)
        except Exception as e:
            self.log.error("Could not release GPUs reserved for %s: %s", owner, e)

    def start(self):
        # a fresh record per spawn, with a future progress() waits on for this spawn's CUDA warnings
        self._spawn = pod_wait.renewed(self._spawn, start=True, notes=asyncio.get_running_loop().create_future())
        # each spawn starts from the admin's start_timeout: a queue's wait or a scale-up raised it for one spawn only
        if self._admin_start_timeout is None:
            self._admin_start_timeout = self.start_timeout
        self.start_timeout = self._admin_start_timeout
        listen_wait.reset(self)
        kueue_wait.extend_start_timeout(self)  # a queued server's wait does not count
        reaper.ensure_running(self)
        # JupyterHub reads start_timeout as start() returns: a pool that must scale up gets its time now
        cache = self.capacity_cache()
        if cache is not None:  # else load_user_options still stretches KubeSpawner's own wait
            scale_up_timeout.stretch_for_options(self, cache.snapshot())
        return super().start()

    async def _start_watching_pods(self, replace=False):
        return await super()._start_watching_pods(replace=replace or pod_wait.revive(self.log, self.pod_reflector))

    async def _start_watching_events(self, replace=False):
        return await super()._start_watching_events(replace=replace or pod_wait.revive(self.log, self.event_reflector))

    async def _start(self):
        self._spawn = replace(self._spawn, starting=True, began=pod_wait._clock())
        try:
            url = await super()._start()
        except asyncio.CancelledError:
            self.release_gpus()
            self.gpu_held = 0
            # JupyterHub cancels start() when start_timeout runs out (jupyterhub/user.py spawn:
            # asyncio.wait_for); an earlier cancellation (hub shutdown) is no failure of the spawn
            if pod_wait._clock() - self._spawn.began >= 0.9 * self.start_timeout:
                pod_wait.count_failure(self, "timeout")
            raise
        except BaseException as e:
            self.release_gpus()
            self.gpu_held = 0
            pod_wait.count_failure(self, pod_wait.failure_reason(e))
            raise
        else:
            if self._spawn.info is not None:
                gpu_metrics.install(self.metrics_registry).spawn_started(self._spawn.info.pool_id)
                await gpu_hours.record_start(self, self._spawn.info)  # the GPU-hour ledger: the pod runs
            # until its server listens, checked more often than JupyterHub's own wait after start does
            await listen_wait.wait(self, url, pod_wait._clock() - self._spawn.began)
            return url
        finally:
            kueue_wait.restore_start_timeout(self)
            self._spawn = replace(self._spawn, starting=False, watch_probe=False)
            pod_wait.notes_known(self)

    def _reflected_pod(self):
        """This server's pod as KubeSpawner's pod reflector shows it (no API call), or None."""
        return unseen_pod.reflected_pod(self)

    def is_pod_running(self, pod):
        """KubeSpawner's test, which its ``_start`` polls until the pod runs; a failed probe, a
        Kueue limit or a pod that can never start ends the wait early (``pod_wait.check_running``)."""
        pod_wait.check_running(self, pod)
        return super().is_pod_running(pod)

    async def progress(self):
        """This spawn's CUDA warning first, then KubeSpawner's events in GPU words (``pod_wait.progress``)."""
        async for event in pod_wait.progress(self, self._spawn.notes, super().progress()):
            yield event

    async def _make_create_pod_request(self, pod, request_timeout):
        """One try at creating the server's pod (``lost_replies.create``): a reply lost on its way
        back is tried again, and a pod of this start found under its name is this start's pod."""
        self._spawn = replace(self._spawn, pod_requested=True)
        return await lost_replies.create(self, pod, request_timeout, self._remove_stale_pod)

    async def _make_delete_pod_request(self, pod_name, delete_options, grace_seconds, request_timeout):
        """KubeSpawner's one try at deleting the pod, with a reply lost on its way back tried again
        (``lost_replies.again_if_lost``) instead of failing the stop."""
        attempt = super()._make_delete_pod_request(pod_name, delete_options, grace_seconds, request_timeout)
        return await lost_replies.again_if_lost(self, f"deleting pod {self.namespace}/{pod_name}", attempt)

    async def _make_create_pvc_request(self, pvc, request_timeout):
        """KubeSpawner's one try at creating the home volume's claim, with a reply lost on its way
        back tried again (its ``409`` then means the claim exists) instead of failing the start."""
        attempt = super()._make_create_pvc_request(pvc, request_timeout)
        return await lost_replies.again_if_lost(self, f"creating PVC {self.namespace}/{pvc.metadata.name}", attempt)

    async def _remove_stale_pod(self):
        """Delete a pod an earlier start left under this server's name, as KubeSpawner's stop does,
        and close its GPU-hour holding; unlike ``stop``, this start keeps its GPU reservation and
        its DRA claim template, which the pod about to be created needs."""
        ended = gpu_hours.pod_end_now(self._reflected_pod())
        await super().stop(now=True)
        gpu_hours.record_stop(self, ended)

    async def poll(self):
        """KubeSpawner's poll, except after a refused start: nothing runs, and nothing needs a
        Kubernetes call to say so. A pod this spawner asked for that the pod reflector has not seen
        is asked of the API server: while it exists the server counts as running, so JupyterHub
        calls ``stop`` and the pod is deleted."""
        if self._spawn.refused:
            return 0
        reaper.ensure_running(self)
        status = await super().poll()
        if self._spawn.pod_requested:
            status = await unseen_pod.poll_status(self, status)
        if status is not None:
            kueue_wait.note_stopped(self)  # Kueue preempted or evicted it: the spawn page says why
            # JupyterHub calls no stop() for a server found stopped: close its GPU-hour holding here
            gpu_hours.record_stop(self, gpu_hours.pod_end_now(self._reflected_pod()), reason="pod-gone")
        elif not self._gpu_ledger_checked and not self._spawn.starting:
            self._gpu_ledger_checked = True  # once per spawner: a server running since before this hub
            await gpu_hours.adopt(self)
        gpu_hours.schedule_sweep(self)  # the GPU-hour ledger: close holdings whose pods ended
        return status

    async def stop(self, now=False):
        self.release_gpus()
        if self._spawn.refused:
            # refused in load_user_options, before KubeSpawner created anything
            self._spawn = replace(self._spawn, refused=False)
            return None
        reaper.ensure_running(self)
        ended = gpu_hours.pod_end_now(self._reflected_pod())  # a pod that ended before the stop
        result = await super().stop(now=now)
        template = self._spawn.dra_template
        self._spawn = replace(self._spawn, pod_requested=False, dra_template=None)
        gpu_hours.record_stop(self, ended)  # the GPU-hour ledger: closed once the pod is gone
        if template is not None:
            dra_templates.release(template)
            await dra_templates.remove_unused_templates(self)
        return result

    def get_state(self):
        state = super().get_state()
        if self.gpu_held is not None:
            state["gpu_held"] = self.gpu_held
        if self._spawn.dra_template is not None:
            # so that a hub restarted while the server runs still cleans up claim templates at its stop
            state["gpu_dra_template"] = self._spawn.dra_template
        kueue_wait.save_stop(self, state)  # why Kueue stopped it, shown until the next start
        return state

    def load_state(self, state):
        super().load_state(state)
        held = state.get("gpu_held")
        self.gpu_held = held if isinstance(held, int) and not isinstance(held, bool) else None
        template = state.get("gpu_dra_template")
        self._spawn = replace(self._spawn, dra_template=template if isinstance(template, str) else None)
        kueue_wait.load_stop(self, state)

    def clear_state(self):
        super().clear_state()
        self.gpu_held = None


def capacity_settings_class(spawner_class: object) -> type[GPUSpawnerSettings]:
    """The class whose config sections hold the hub's GPU capacity settings: the hub's spawner
    class when it is a ``GPUSpawnerSettings`` (``GPUSpawner`` or a subclass), else ``GPUSpawner``,
    where the docs tell an admin to write them (a hub that runs another spawner)."""
    if isinstance(spawner_class, type) and issubclass(spawner_class, GPUSpawnerSettings):
        return spawner_class
    return GPUSpawner
