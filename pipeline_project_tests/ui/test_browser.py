"""The three screens a person uses, in a real browser (Debian's headless Chromium, driven by Selenium through
chromium-driver), after the demo materializations of `demo_runs`: Dagster's asset graph, the newest checkpoint
materialization (metadata and the loss-curve image) and its check result; MLflow's comparison of the two training
runs' loss curves; the registered model's page. Each screen is saved as a PNG in a scratch folder, or, with
PIPELINE_UPDATE_SCREENSHOTS=1, under docs/screenshots/, which the README shows (a test run leaves the tree as it
was). Every wait is a WebDriverWait on what the page must show."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack

SHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("PIPELINE_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "pipeline-project-screenshots"
)
MAX_SHOT_BYTES = 300 * 1024
WAIT_S = 60
ASSETS = ("raw_text", "cleaned_shards", "token_blocks", "deepseek_checkpoint")


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra")
    chromium, driver_bin = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_bin):
        pytest.fail("needs Debian's chromium and chromium-driver (scripts/setup.sh installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,800"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=driver_bin), options=options)
    yield driver
    driver.quit()


def _wait(driver, condition, message: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.25).until(condition, message)


def _text_shown(driver, text: str):
    from selenium.webdriver.common.by import By

    return [e for e in driver.find_elements(By.XPATH, f"//*[normalize-space(text())='{text}']") if e.is_displayed()]


def _shot(driver, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    path.write_bytes(driver.get_screenshot_as_png())
    assert path.stat().st_size < MAX_SHOT_BYTES, f"{path} is {path.stat().st_size} bytes"
    return path


def _dagster_nux_seen(dagster_url: str) -> None:
    """Mark Dagster's one-time "Join the community" dialog seen on this instance, so it covers no screenshot."""
    body = json.dumps({"query": "mutation { setNuxSeen }"}).encode()
    request = urllib.request.Request(f"{dagster_url}/graphql", body, {"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


@pytest.fixture(scope="module")
def dagster(browser, demo_runs):
    _dagster_nux_seen(demo_runs.dagster_url)
    return browser


def test_dagster_asset_graph_shows_the_four_assets(dagster, demo_runs):
    dagster.get(f"{demo_runs.dagster_url}/assets/deepseek_checkpoint?view=lineage&lineageScope=upstream&lineageDepth=3")
    for name in ASSETS:
        _wait(dagster, lambda d, n=name: _text_shown(d, n), f"asset {name} in the graph")
    _shot(dagster, "dagster-asset-graph")


def test_dagster_latest_materialization_shows_metadata_and_the_loss_curve(dagster, demo_runs):
    from selenium.webdriver.common.by import By

    meta = demo_runs.second.metadata
    dagster.get(f"{demo_runs.dagster_url}/assets/deepseek_checkpoint")
    for value in (meta["mlflow_run_id"], meta["checkpoint_uri"], meta["registered_model"]):
        _wait(dagster, lambda d, v=value: _text_shown(d, v), f"metadata value {value}")
    url = meta["loss_curve"].split("](", 1)[1].split(")", 1)[0]

    def curve_loaded(d):
        images = [i for i in d.find_elements(By.TAG_NAME, "img") if i.get_attribute("src") == url]
        return images if images and d.execute_script("return arguments[0].naturalWidth", images[0]) > 0 else False

    image = _wait(dagster, curve_loaded, "the loss-curve image, loaded from MLflow")[0]
    dagster.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
    _shot(dagster, "dagster-materialization")


def test_dagster_check_result_renders(dagster, demo_runs):
    assert demo_runs.second.checks == {"loss_is_finite": True, "checkpoint_reloads": True}
    dagster.get(f"{demo_runs.dagster_url}/assets/deepseek_checkpoint?view=checks")
    _wait(dagster, lambda d: _text_shown(d, "checkpoint_reloads"), "the blocking check")
    _wait(dagster, lambda d: _text_shown(d, "Passed"), "its evaluation result")
    _wait(dagster, lambda d: _text_shown(d, demo_runs.second.metadata["checkpoint_uri"]), "the check's metadata")
    _shot(dagster, "dagster-check")


def _close_mlflow_assistant(driver) -> None:
    from selenium.webdriver.common.by import By

    for button in driver.find_elements(By.CSS_SELECTOR, "button[aria-label='Close']"):
        if button.is_displayed():
            button.click()


def test_mlflow_compares_the_two_runs_loss_curves(browser, demo_runs):
    from mlflow.tracking import MlflowClient
    from selenium.webdriver.common.by import By

    client = MlflowClient(demo_runs.mlflow_url)
    runs = [client.get_run(t.metadata["mlflow_run_id"]) for t in (demo_runs.first, demo_runs.second)]
    query = {
        "runs": json.dumps([r.info.run_id for r in runs]),
        "metric": json.dumps("loss"),
        "experiments": json.dumps([runs[0].info.experiment_id]),
        "plot_metric_keys": json.dumps(["loss"]),
        "plot_layout": "{}",
        "x_axis": "step",
        "y_axis_scale": "linear",
        "line_smoothness": "1",
        "show_point": "true",
        "deselected_curves": "[]",
        "last_linear_y_axis_range": "[]",
    }
    browser.get(f"{demo_runs.mlflow_url}/#/metric?{urllib.parse.urlencode(query)}")
    _wait(browser, lambda d: _text_shown(d, "Comparing 2 Runs from 1 Experiment"), "the comparison's title")
    for run in runs:
        _wait(browser, lambda d, n=run.info.run_name: _text_shown(d, f"{n} (loss)"), f"legend of {run.info.run_name}")
    _wait(
        browser,
        lambda d: len([p for p in d.find_elements(By.CSS_SELECTOR, ".scatterlayer .trace path.js-line")]) >= 2,
        "two drawn loss curves",
    )
    _close_mlflow_assistant(browser)
    _wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "button[aria-label='Send message']"), "room")
    _shot(browser, "mlflow-compare-loss")


def test_mlflow_registered_model_page(browser, demo_runs):
    from selenium.webdriver.common.by import By

    browser.get(f"{demo_runs.mlflow_url}/#/models/{demo_runs.model_name}")
    _wait(browser, lambda d: _text_shown(d, demo_runs.model_name), "the model's name")
    for text in ("Version 2", "Version 1"):
        _wait(browser, lambda d, t=text: _text_shown(d, t), text)
    _wait(
        browser,
        lambda d: "latest-checkpoint" in d.find_element(By.TAG_NAME, "body").text,
        "the alias on the newest version",
    )
    _close_mlflow_assistant(browser)
    _shot(browser, "mlflow-registered-model")
