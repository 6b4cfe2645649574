"""The spawn page's GPU-hours in a real browser: the user's standing, and what the chosen pool and GPU
count would use per hour of their budget, following the choice (the demo hub: no budget, weight 1)."""

from __future__ import annotations

from playwright.sync_api import expect

from .test_spawn_page import A100, T4, browser_test, open_spawn_page, pool_radio

COST = "#gs-gpu-hour-cost"
COUNT = 'select[name="profile-option-gpu--gpus"]'


@browser_test
def test_the_cost_per_hour_follows_the_chosen_pool_and_count(hub, new_page, login):
    page = new_page()
    login(page, "cost")
    open_spawn_page(hub, page)
    expect(page.locator(".gs-gpu-hours-left")).to_have_text(
        "You have used 0 GPU-hours in the last 30 days; no GPU-hour budget applies to you.")
    pool_radio(page, A100).check()
    page.select_option(COUNT, "2")
    expect(page.locator(COST)).to_have_text("This server would use 2 GPU-hours per hour of your budget.")
    page.select_option(COUNT, "1")
    expect(page.locator(COST)).to_have_text("This server would use 1 GPU-hour per hour of your budget.")
    pool_radio(page, T4).check()
    expect(page.locator(COST)).to_be_visible()
    page.locator("#profile-item-cpu").check()  # a CPU server costs no GPU-hours: the line goes
    expect(page.locator(COST)).to_be_hidden()
